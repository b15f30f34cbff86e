# Helpers the shell tests source (tests/package.sh, container.sh, systemd.sh).
# Each sets `name` first; every line it prints starts with it.

note() { echo "$name: $*"; }
# A tool or privilege the test needs is missing: a note, or under CI a failure.
unavailable() {
    if [ "${CI:-}" = true ]; then
        note "FAILED: $*"
        exit 1
    fi
    note "skipped: $*"
    exit 0
}
fail() {
    note "FAILED: $*"
    exit 1
}

# The container tests: root, podman, runc and mmdebstrap.
need_podman() {
    [ "$(id -u)" = 0 ] || unavailable "needs root"
    for tool in podman runc mmdebstrap; do
        command -v "$tool" >/dev/null || unavailable "$tool is not installed"
    done
}

# crun, podman's default, cannot run containers on this host's hybrid
# cgroup layout; runc can. This sandbox also lacks CAP_SYS_RESOURCE, so the
# limits are set to what podman itself lowers them to.
pod() { podman --runtime runc "$@"; }
limits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=32768:32768)

# The base image both container tests build on: Debian bookworm (minbase,
# plus systemd for tests/systemd.sh and python3 for its client), made by
# mmdebstrap from Debian's packages, as no image registry is reachable here.
# Made once, then kept for the next run.
base_image=localhost/sprout-test/debian:bookworm-systemd
make_base_image() {
    pod image exists "$base_image" && return
    note "making $base_image with mmdebstrap"
    local tar
    tar=$(mktemp --suffix=.tar)
    mmdebstrap --quiet --variant=minbase --mode=root \
        --include=systemd,systemd-sysv,dbus,adduser,python3-minimal \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' bookworm "$tar"
    pod import "$tar" "$base_image" >/dev/null
    rm -f "$tar"
}

# A TCP port free on 127.0.0.1 right now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ask PORT BYTES: waits (up to 10 s) until 127.0.0.1:PORT answers BYTES
# (backslash escapes such as \r\n are decoded), prints the first reply line.
ask() {
    python3 - "$1" "$2" <<'PY'
import socket, sys, time
deadline = time.time() + 10
while True:
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        s.settimeout(5)
        s.sendall(sys.argv[2].encode().decode("unicode_escape").encode())
        reply = s.recv(4096).decode()
        if reply:
            print(reply.split("\r\n")[0])
            break
    except OSError:
        pass
    if time.time() > deadline:
        sys.exit("no answer on port %s" % sys.argv[1])
    time.sleep(0.1)
PY
}
