#!/usr/bin/env bash
# The whole test suite: installs what the tests need, then runs every test.
#
# Needs: a Rust toolchain and python3 (for a real client from PyPI).
# Idempotent: a second run reuses the Python environment under target/.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=target/test-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check 'greenstalk==2.1.1'

cargo build --release --bin sprout
cargo test --workspace --all-targets
"$venv/bin/python" tests/clients/greenstalk_smoke.py target/release/sprout
