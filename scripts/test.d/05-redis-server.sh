#!/usr/bin/env bash
# Before the tests that start real Redis servers on free ports run (toolgate-redis's
# and the gateway's in 20-rust-tests.sh, the Python package's in 50-python.sh), make
# sure redis-server exists: they fail without one.
set -euo pipefail
bash scripts/install-redis-server
redis-server --version
