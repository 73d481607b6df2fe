#!/usr/bin/env bash
# Shared quotas on Redis: the toolgate-redis tests (semantic suite on one server and on a
# 3-master cluster, 4 processes on one quota, faults, expiry). They start their own
# redis-server processes on free ports and fail loudly when redis-server is missing.
set -euo pipefail
bash scripts/install-redis-server
cargo test -p toolgate-redis --locked
