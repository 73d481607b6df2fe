# Shared pieces of the benchmark scripts (sourced, not run): wrk, a redis-server of
# the script's own on a free port, a server started on an ephemeral port, a process's
# CPU time and a median. Each script keeps its own `pids` array (every process started
# here is added to it) and kills them on exit.

# Installs wrk when missing (apt-get, as root) and fails loudly if it still is.
bench_need_wrk() {
  if ! command -v wrk >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
  fi
  command -v wrk >/dev/null 2>&1 || { echo "$0: wrk is missing (apt-get install wrk)" >&2; exit 1; }
}

# A free TCP port on loopback.
bench_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Installs redis-server and redis-cli when missing (scripts/install-redis-server)
# and fails loudly if they still are.
bench_need_redis() {
  bash scripts/install-redis-server
  local tool
  for tool in redis-server redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || { echo "$0: $tool is missing" >&2; exit 1; }
  done
}

# bench_start_redis DIR: a redis-server that keeps nothing on disk, on a free port,
# its files in DIR; sets $redis_port and $redis_pid once it answers.
bench_start_redis() {
  bench_need_redis
  redis_port=$(bench_free_port)
  mkdir -p "$1"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$1" >/dev/null &
  redis_pid=$!
  pids+=("$redis_pid")
  for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "$0: redis-server did not start" >&2; exit 1
}

# bench_start WORK NAME CMD...: runs CMD (a server that prints its http:// address),
# output in WORK/NAME.out and WORK/NAME.err; sets $addr and $spid once it listens.
bench_start() {
  local work=$1 name=$2; shift 2
  "$@" > "$work/$name.out" 2> "$work/$name.err" &
  spid=$!
  pids+=("$spid")
  bench_await_addr "$work/$name.out" 200 0.05 ||
    { echo "$0: $name did not start: $(cat "$work/$name.err")" >&2; exit 1; }
}

# bench_await_addr FILE TRIES PAUSE: sets $addr to the first http:// address a
# server printed to FILE, looking TRIES times PAUSE seconds apart; fails if none came.
bench_await_addr() {
  for _ in $(seq "$2"); do
    addr=$(grep -o 'http://[0-9.:]*' "$1" | head -1 || true)
    [ -n "$addr" ] && return 0
    sleep "$3"
  done
  return 1
}

# bench_callgrind_start WORK NAME CMD...: runs CMD (a server that prints its http://
# address) under callgrind, its output in WORK/NAME.log and its dumps in
# WORK/NAME.<pid>.<n>; sets $addr and $vpid once it listens (up to 2 minutes:
# valgrind starts slowly).
bench_callgrind_start() {
  local work=$1 name=$2; shift 2
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.%p" "$@" > "$work/$name.log" 2>&1 &
  vpid=$!
  pids+=("$vpid")
  bench_await_addr "$work/$name.log" 600 0.2 ||
    { echo "$0: $name did not start under valgrind: $(cat "$work/$name.log")" >&2; exit 1; }
}

# bench_callgrind_stop WORK NAME: dumps the counters of the server that
# bench_callgrind_start WORK NAME started ($vpid), stops it, and sets
# $callgrind_total to the instructions counted since they were last zeroed
# (`callgrind_control -z $vpid`).
bench_callgrind_stop() {
  callgrind_control -d "$vpid" > /dev/null 2>&1
  kill "$vpid" 2>/dev/null || true
  wait "$vpid" 2>/dev/null || true
  local dump
  dump=$(ls -t "$1/$2".*.* 2>/dev/null | head -1)
  [ -n "$dump" ] || { echo "$0: $2: no callgrind dump" >&2; exit 1; }
  callgrind_total=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
}

# bench_cpu PID: the process's user + system time so far, in clock ticks.
bench_cpu() {
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# The median of the numbers on stdin, one per line.
bench_median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# bench_spread FORMAT: the numbers on stdin as "median (min–max)", each printed with
# the printf FORMAT (e.g. %.2f): the summary of per-round ratios.
bench_spread() {
  local sorted
  sorted=$(sort -g)
  printf "$1 ($1–$1)" "$(echo "$sorted" | bench_median)" "$(echo "$sorted" | head -1)" "$(echo "$sorted" | tail -1)"
}

# bench_exe ARGS...: the path of the benchmark executable `cargo bench ARGS --no-run`
# builds (exactly one), read off cargo's JSON messages.
bench_exe() {
  cargo bench --locked -q "$@" --no-run --message-format=json |
    python3 -c 'import json, sys
exes = [m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")]
sys.exit("bench_exe: expected one executable, got %d" % len(exes)) if len(exes) != 1 else print(exes[0])'
}

# bench_base REV: a worktree of REV (the build compared against), detached, in
# $work/base, built into a target directory of its own under target/bench-base (kept
# between runs); sets $base_dir and $base_target. The script's exit trap calls
# bench_base_cleanup, which removes the worktree if there is one.
bench_base() {
  local sha
  sha=$(git rev-parse --verify --quiet "$1^{commit}") || { echo "$0: no such revision: $1" >&2; exit 1; }
  base_dir="$work/base"
  base_target="$PWD/target/bench-base/$sha"
  git worktree add -q --detach "$base_dir" "$sha"
}

bench_base_cleanup() {
  if [ -n "${base_dir:-}" ] && [ -d "$base_dir" ]; then git worktree remove --force "$base_dir"; fi
}

# bench_gateway_files WORK: the gateway benchmarks' config and wrk scripts, in WORK:
# bench.toml (one tool that always admits, one that always refuses), bench-redis.toml
# (the same on the Redis store), open.lua and closed.lua (POST /v1/admit of each).
bench_gateway_files() {
  cat > "$1/bench.toml" <<'TOML'
[gateway]
lease_ttl = "1s"          # leases are not completed by the load generator
max_leases = 1000000      # ~100k admissions/s hold ~100k leases open (default cap 100,000)

[tools.open]              # always admitted
rate = "1000000/s"

[tools.closed]            # always rejected (429) after the first call
rate = "1/h"
TOML
  printf '[store]\ntimeout = "1s"\n' | cat - "$1/bench.toml" > "$1/bench-redis.toml"
  local t
  for t in open closed; do
    printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' \
      "'{\"tool\":\"$t\"}'" > "$1/$t.lua"
  done
}

# bench_ab_start WORK BIN_A BIN_B STORE: two gateways, A and B (each an executable),
# serving bench_gateway_files' config on STORE (memory, or redis: one `redis-server`
# of the script's own, a key prefix each); WORK/open.lua admits. Fails when a binary
# or the store is not one of those. Sets $aaddr $apid $baddr $bpid, and $rpid
# (redis-server's pid, or empty).
bench_ab_start() {
  local work=$1 a=$2 b=$3 store=$4 bin config=$1/bench.toml store_args=()
  for bin in "$a" "$b"; do
    [ -x "$bin" ] || { echo "$0: $bin is not an executable" >&2; exit 1; }
  done
  case "$store" in
    redis | memory) ;;
    *) echo "$0: STORE is memory or redis, not $store" >&2; exit 2 ;;
  esac
  bench_gateway_files "$work"
  rpid=
  if [ "$store" = redis ]; then
    bench_start_redis "$work/redis"
    rpid=$redis_pid
    store_args=(--store "redis://127.0.0.1:$redis_port")
    config=$work/bench-redis.toml
  fi
  sed 's/^\[store\]$/[store]\nkey_prefix = "tga:"/' "$config" > "$work/a.toml"
  sed 's/^\[store\]$/[store]\nkey_prefix = "tgb:"/' "$config" > "$work/b.toml"
  bench_start "$work" a "$a" serve --config "$work/a.toml" --listen 127.0.0.1:0 "${store_args[@]}"
  aaddr=$addr; apid=$spid
  bench_start "$work" b "$b" serve --config "$work/b.toml" --listen 127.0.0.1:0 "${store_args[@]}"
  baddr=$addr; bpid=$spid
}

# bench_redis_scripts PORT: "runs µs" of the scripts (EVALSHA and EVAL) the
# `redis-server` on PORT ran since its statistics were last reset (`INFO commandstats`).
bench_redis_scripts() {
  redis-cli -p "$1" info commandstats |
    awk -F'[=,:]' '/^cmdstat_(evalsha|eval):/ { n += $3; u += $5 } END { printf "%d %d\n", n, u }'
}
