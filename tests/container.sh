#!/usr/bin/env bash
# The container image, for real, with Debian's podman: builds the
# Dockerfile's runtime stage as written (its builder stage swapped for
# the binary of the same `--profile dist` build, made here, since no Rust
# image can be pulled here) on the
# Debian bookworm base of tests/lib.sh (no image registry is reachable
# here), runs it, and checks:
# the image's binary is the stripped one and under 15 MB, it serves on
# the published port as a non-root user, the HEALTHCHECK
# passes (and fails when the port is elsewhere), a job outlives a restart
# in the volume, SIGTERM stops it cleanly, and flags override the image's
# 0.0.0.0 default.
#
# Needs root, podman, runc and mmdebstrap (.ci/run installs them). Without
# them it prints a note and passes, except under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."

name="container test"
# shellcheck source=tests/lib.sh
. tests/lib.sh

need_podman
# What the Dockerfile's builder stage installs: release without debug
# info, stripped (Cargo.toml's [profile.dist]).
cargo build --quiet --locked --profile dist --bin sprout
binary=${CARGO_TARGET_DIR:-target}/dist/sprout

image=localhost/sprout-test/sprout:$$
volume=sprout-test-$$
containers=()
cleanup() {
    for c in "${containers[@]}"; do pod rm -f -v "$c" >/dev/null 2>&1 || true; done
    pod volume rm -f "$volume" >/dev/null 2>&1 || true
    pod rmi -f "$image" >/dev/null 2>&1 || true
    rm -rf "${context:-}"
}
trap cleanup EXIT

make_base_image

# The Dockerfile with its builder stage swapped for one that holds the
# dist binary: the runtime stage, everything after the second FROM, is
# built as written.
context=$(mktemp -d)
cp "$binary" "$context/sprout"
awk '
    /^FROM / { from++ }
    from == 1 && /^FROM / { print "FROM scratch AS builder"; print "COPY sprout /out/bin/sprout"; next }
    from != 1 { print }
' Dockerfile >"$context/Dockerfile"
grep -q '^FROM ${RUNTIME_IMAGE}$' "$context/Dockerfile" || fail "no runtime stage in the Dockerfile"
pod build --quiet --format docker --pull=never --build-arg RUNTIME_IMAGE="$base_image" \
    -t "$image" "$context" >"$context/build.log" 2>&1 || fail "podman build: $(cat "$context/build.log")"
note "built $image"

# The shipped binary carries no debug info (81 MB of a 99.6 MB binary
# once): under 15 MB.
size=$(pod run --rm "${limits[@]}" --entrypoint stat "$image" -c %s /usr/local/bin/sprout)
[ "$size" -lt 15000000 ] || fail "the image's binary is $size bytes, not under 15 MB"
note "the image's binary: $size bytes"

run() {
    local name=$1
    shift
    containers+=("$name")
    pod run -d --name "$name" "${limits[@]}" "$@" >/dev/null 2>/tmp/sprout-container-run.log ||
        fail "podman run: $(cat /tmp/sprout-container-run.log)"
    pod container exists "$name" || fail "podman run: $(cat /tmp/sprout-container-run.log)"
}
# podman's own scheduling of health checks needs systemd; run them by hand.
healthy() { pod healthcheck run "$1" >/dev/null 2>&1; }

port=$(free_port)
run "sprout-test-$$" -p "127.0.0.1:$port:11300" -v "$volume:/var/lib/sprout" "$image"
reply=$(ask "$port" 'put 0 0 60 4\r\nkept\r\n') || fail "no answer: $(pod logs "sprout-test-$$" 2>&1)"
[[ "$reply" == "INSERTED "* ]] || fail "put answered: $reply"
uid=$(pod exec "sprout-test-$$" id -u)
[ "$uid" != 0 ] || fail "the server runs as root"
healthy "sprout-test-$$" || fail "HEALTHCHECK fails on a serving container"
note "serves on the published port as uid $uid; HEALTHCHECK passes"

# (podman complains on stderr that it has no systemd to time health checks.)
pod stop -t 10 "sprout-test-$$" >/dev/null 2>&1
code=$(pod inspect -f '{{.State.ExitCode}}' "sprout-test-$$")
[ "$code" = 0 ] || fail "exit code $code after podman stop (SIGTERM)"
pod start "sprout-test-$$" >/dev/null 2>&1
reply=$(ask "$port" 'stats-job 1\r\n')
[[ "$reply" == "OK "* ]] || fail "the job did not survive a restart in the volume: $reply"
note "SIGTERM exits 0; the job survived a restart in the volume"

# Flags after the image name win over its SPROUT_* defaults; the health
# check (on SPROUT_PORT) then finds nothing and says so.
run "sprout-test-flags-$$" "$image" -l 127.0.0.1 -p 11999 -V
for _ in $(seq 50); do
    logs=$(pod logs "sprout-test-flags-$$" 2>&1)
    [[ "$logs" == *"listening on 127.0.0.1:11999"* ]] && break
    sleep 0.1
done
[[ "$logs" == *"listening on 127.0.0.1:11999"* ]] ||
    fail "flags did not override the image's defaults: $logs"
! healthy "sprout-test-flags-$$" || fail "HEALTHCHECK passes with nothing on SPROUT_PORT"
note "flags override the image's defaults; HEALTHCHECK fails when nothing serves"
echo "container test: 1 passed, 0 failed"
