#!/usr/bin/env bash
# Unit, integration, property, doc tests and each benchmark run once as a test (so
# benchmarks cannot rot) for every crate; then the loom model checks of the core's
# shared state. The gateway's dashboard test runs here in headless Chromium
# (installed by 15-chromium.sh) and may not skip.
set -euo pipefail
export TOOLGATE_REQUIRE_CHROMIUM=1
cargo test --workspace --all-targets --locked
cargo test --workspace --doc --locked
RUSTFLAGS="--cfg loom" cargo test -p toolgate --test loom --locked --target-dir target/loom
