#!/usr/bin/env bash
# Starts sprout with the HTTP side port on and a scraper reading /metrics
# every second, as Prometheus would: compare.sh's A side for measuring what
# --http costs the beanstalk port (`--a-cmd benches/http-wrap.sh --b-cmd
# target/release/sprout`). exec keeps the pid sprout's, so compare.sh's CPU
# figures are the server's; the scraper stops when the server does.
# SPROUT: the binary (default: this tree's release build).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
sprout=${SPROUT:-${CARGO_TARGET_DIR:-$here/target}/release/sprout}
for _ in $(seq 100); do
    http=$((12000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$http") 2>/dev/null || break
done
server=$$
(
    while kill -0 "$server" 2>/dev/null; do
        curl -s -o /dev/null "http://127.0.0.1:$http/metrics" || true
        sleep 1
    done
) </dev/null >/dev/null 2>&1 &
exec "$sprout" --http "127.0.0.1:$http" "$@"
