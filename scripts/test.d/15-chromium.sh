#!/usr/bin/env bash
# Chromium for the gateway's dashboard test (crates/toolgate-gateway/tests/gateway/
# dashboard.rs), which 20-rust-tests.sh runs with TOOLGATE_REQUIRE_CHROMIUM=1 so that
# it cannot skip. Installs Debian's chromium when it is missing. The test saves its
# screenshots as target/artifacts/dashboard.png and dashboard-breakdown.png.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium is missing and cannot be installed here (needs root and apt-get)" >&2
    exit 1
  fi
fi
