#!/usr/bin/env bash
# Unit, integration, property, doc tests and each benchmark run once as a test (so
# benchmarks cannot rot) for every crate; then the loom model checks of the core's
# shared state.
set -euo pipefail
cargo test --workspace --all-targets --locked
cargo test --workspace --doc --locked
RUSTFLAGS="--cfg loom" cargo test -p toolgate --test loom --locked --target-dir target/loom
