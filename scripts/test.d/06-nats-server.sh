#!/usr/bin/env bash
# Before the workspace tests (20-rust-tests.sh) run the event mesh's tests, make sure
# nats-server exists: those tests start real servers and fail without one.
set -euo pipefail
bash scripts/install-nats-server
"${TOOLGATE_NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}" --version
