#!/usr/bin/env bash
# Before the workspace tests (20-rust-tests.sh) run the toolgate-redis tests, make sure
# redis-server exists: those tests start real servers and fail without one.
set -euo pipefail
bash scripts/install-redis-server
redis-server --version
