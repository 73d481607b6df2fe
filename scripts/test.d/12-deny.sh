#!/usr/bin/env bash
# The dependency tree against deny.toml: licenses on the allow-list, no crate from an
# unknown registry or git repository, no wildcard version (duplicate versions are
# shown as warnings). Installs cargo-deny when missing: it compiles once per machine
# (about 9 minutes on 2 busy cores). The advisories check is left out: its database
# is cloned from GitHub, which CI machines cannot reach (see deny.toml).
set -euo pipefail
if ! command -v cargo-deny >/dev/null 2>&1; then
  echo "installing cargo-deny (cargo install, once per machine)"
  cargo install --locked cargo-deny@0.20.2
fi
cargo deny --version
cargo deny --locked check --hide-inclusion-graph bans licenses sources
