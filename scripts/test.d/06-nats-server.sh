#!/usr/bin/env bash
# Before the tests that start real NATS servers on free ports run (the event mesh's and
# the gateway's in 20-rust-tests.sh, the mesh example's in 50-python.sh), make sure
# nats-server exists: they fail without one.
set -euo pipefail
bash scripts/install-nats-server
"${TOOLGATE_NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}" --version
