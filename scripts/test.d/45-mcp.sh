#!/usr/bin/env bash
# The MCP gateway end to end (crates/toolgate-mcp/tests/python): the official Python
# `mcp` client (PyPI) talks to `toolgate serve` at /mcp and to `toolgate mcp` on
# stdio, in front of @modelcontextprotocol/server-everything (npm) started by
# toolgate as a stdio upstream. Installs what it needs, idempotently: the pinned npm
# package into target/mcp-node (npm ci from the committed package-lock.json, again
# only when the lock changed), the pip requirements into the venv it shares with
# 50-python.sh (scripts/py-venv-default: one per machine and set of pins, created by
# scripts/py-venv when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
target="${CARGO_TARGET_DIR:-$root/target}"
venv=$(bash scripts/py-venv-default)
node_src=crates/toolgate-mcp/tests/node
node_dir="$target/mcp-node"

if ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing nodejs and npm (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "npm is missing and cannot be installed here (needs root and apt-get)" >&2
    exit 1
  fi
fi
mkdir -p "$node_dir"
if ! cmp -s "$node_src/package-lock.json" "$node_dir/package-lock.json" \
   || [ ! -d "$node_dir/node_modules/@modelcontextprotocol/server-everything" ]; then
  cp "$node_src/package.json" "$node_src/package-lock.json" "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi

bash scripts/py-venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  -r crates/toolgate-mcp/tests/requirements.txt

# The `toolgate` binary as `cargo test --workspace --all-targets` builds it (nothing to
# do after 20-rust-tests): `cargo build -p toolgate-gateway` alone resolves other
# features for shared dependencies and compiled a second copy of the gateway and part
# of its tree (36–80 s on a slow 2-vCPU VM).
cargo test -q --workspace --all-targets --no-run --locked
export TOOLGATE_BIN="$target/debug/toolgate"
export TOOLGATE_MCP_EVERYTHING="$node_dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
"$venv/bin/python" -m pytest -q -p no:cacheprovider crates/toolgate-mcp/tests/python
