#!/usr/bin/env bash
# The gateway's dashboard test in headless Chromium. Installs Debian's chromium when
# it is missing, then runs the test with TOOLGATE_REQUIRE_CHROMIUM=1 so that it cannot
# skip. (The gateway's other tests run in 20-rust-tests.sh with `cargo test`.)
# The screenshot is saved as target/artifacts/dashboard.png.
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
TOOLGATE_REQUIRE_CHROMIUM=1 cargo test -p toolgate-gateway --locked --test gateway dashboard
echo "dashboard screenshot: target/artifacts/dashboard.png"
