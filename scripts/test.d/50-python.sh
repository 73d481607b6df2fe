#!/usr/bin/env bash
# The Python package (crates/toolgate-py): builds its abi3 wheel with maturin and
# installs that wheel into a venv (what users get, not an editable build), checks
# its stubs against the compiled module (mypy.stubtest) and its Python sources
# (mypy --strict), then runs its pytest suite, which includes a real Agent Framework
# agent, a Google ADK runner, the OpenAI Agents SDK and LangChain adapters
# (offline), shared quotas on a real redis-server, the clients against a real
# `toolgate serve` and the mesh on a real nats-server.
# A debug (dev-profile) wheel: it reuses what `cargo test --workspace` compiled,
# and the tests do not depend on speed (scripts/bench-python builds with --release;
# a release wheel would cost minutes more on two cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=$(bash scripts/py-venv-default)

bash scripts/py-venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r crates/toolgate-py/requirements-test.txt
# The tests run the gateway binary as `cargo test --workspace --all-targets` builds it
# (nothing to do after 20-rust-tests); see 45-mcp.sh.
cargo test -q --workspace --all-targets --no-run --locked
wheels="$PWD/target/py-wheels"
rm -f "$wheels"/toolgate-*.whl
(cd crates/toolgate-py && "$venv/bin/maturin" build --locked -q -i "$venv/bin/python" -o "$wheels")
wheel=$(ls "$wheels"/toolgate-*.whl)
case "$wheel" in
  *-abi3-*) ;;
  *) echo "50-python: $wheel is not an abi3 wheel" >&2; exit 1 ;;
esac
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$venv/bin/python" -m pip check
"$venv/bin/python" -m mypy.stubtest toolgate._toolgate
"$venv/bin/python" -m mypy --config-file crates/toolgate-py/pyproject.toml crates/toolgate-py/python/toolgate
export TOOLGATE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/toolgate"
cd crates/toolgate-py
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests
