#!/usr/bin/env bash
# Unit, integration, property and doc tests of every crate; then the loom model
# checks of the core's shared state; then each benchmark once as a test (fast mode),
# so benchmarks cannot rot.
set -euo pipefail
cargo test --workspace --locked
RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}" \
  cargo test -p toolgate --test loom --release --locked --target-dir target/loom
cargo bench -p toolgate --locked --bench toolgate_benches -- --test
