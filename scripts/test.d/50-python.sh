#!/usr/bin/env bash
# The Python package (crates/toolgate-py): builds it from source into a venv,
# checks its stubs against the compiled module (mypy.stubtest) and its Python
# sources (mypy --strict), then runs its pytest suite, which includes a real
# Agent Framework agent, the OpenAI Agents SDK and LangChain adapters (offline),
# shared quotas on a real redis-server and the mesh example on a real nats-server.
# A debug build: it reuses what `cargo test --workspace` compiled, and the
# tests do not depend on speed (scripts/bench-python builds with --release).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${TOOLGATE_PY_VENV:-target/py-venv}"

pick_python() {
  for py in "${PYTHON:-}" python3 python3.13 python3.12 python3.11 python3.10; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
    if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "50-python: no Python >= 3.10 found" >&2
  return 1
}

if [ ! -x "$venv/bin/python" ]; then
  "$(pick_python)" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r crates/toolgate-py/requirements-test.txt
(cd crates/toolgate-py && VIRTUAL_ENV="$PWD/../../$venv" "../../$venv/bin/maturin" develop --locked -q)
"$venv/bin/python" -m mypy.stubtest toolgate._toolgate
"$venv/bin/python" -m mypy --config-file crates/toolgate-py/pyproject.toml crates/toolgate-py/python/toolgate
# The mesh example's test runs the gateway binary (built by 20-rust-tests.sh).
cargo build -q -p toolgate-gateway --locked
export TOOLGATE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/toolgate"
cd crates/toolgate-py
"../../$venv/bin/python" -m pytest -q -p no:cacheprovider tests
