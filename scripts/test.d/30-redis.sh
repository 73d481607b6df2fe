#!/usr/bin/env bash
# Shared quotas on Redis: installs redis-server (and redis-cli, for the cluster test)
# when missing, then runs the toolgate-redis tests, which start their own servers on
# free ports. (They also run in `cargo test --workspace`; this part makes sure the
# server exists first.)
set -euo pipefail
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "installing redis-server"
  if command -v apt-get >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >/dev/null
  else
    echo "redis-server is missing and apt-get is not available: install Redis >= 6" >&2
    exit 1
  fi
fi
redis-server --version
cargo test -p toolgate-redis --locked
