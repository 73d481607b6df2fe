#!/usr/bin/env bash
# The layering of every crate and Python package (no import cycle beyond those listed
# in scripts/layers-allowed.txt) and the tests of its checker; the size of the core's
# files; then formatting, lints and docs of the whole workspace.
set -euo pipefail
python3 -m unittest discover -q -s scripts -p 'test_*.py'
python3 scripts/check-layers
python3 scripts/check-sizes
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings -D rustdoc::broken_intra_doc_links" cargo doc --workspace --no-deps --locked
