#!/usr/bin/env bash
# The Debian package under a real systemd: boots systemd as PID 1 in a
# podman container (the Debian bookworm base of tests/lib.sh),
# installs the .deb there, and checks what only a running systemd can show:
# sprout.socket holds 127.0.0.1:11301 and /run/sprout/sprout.sock and
# passes them to sprout.service; Type=notify completes (READY=1) only after
# recovery and the status line names the sockets; the hardening is in force
# (non-root, no capabilities, no_new_privs, a seccomp filter); a job
# outlives a restart; a connection to the socket starts a stopped service;
# systemctl stop (STOPPING=1, SIGTERM) ends it with success.
#
# Needs what tests/container.sh needs, and the .deb (built when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

name="systemd test"
# shellcheck source=tests/lib.sh
. tests/lib.sh
need_podman
command -v python3 >/dev/null || unavailable "python3 is not installed"

deb=$(ls target/debian/sprout_*.deb 2>/dev/null | tail -n 1 || true)
if [ -z "$deb" ]; then
    deb=$(cargo deb --strip --quiet | tail -n 1)
fi
image=localhost/sprout-test/sprout-systemd:$$
container=sprout-systemd-$$
work=$(mktemp -d)
cleanup() {
    pod rm -f -v "$container" >/dev/null 2>&1 || true
    pod rmi -f "$image" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

make_base_image
cp "$deb" "$work/sprout.deb"
cat >"$work/Containerfile" <<EOF2
FROM $base_image
COPY sprout.deb /tmp/
RUN dpkg -i /tmp/sprout.deb && rm /tmp/sprout.deb
CMD ["/sbin/init"]
EOF2
pod build --quiet --pull=never -t "$image" "$work" >"$work/build.log" 2>&1 ||
    fail "podman build: $(cat "$work/build.log")"
pod run -d --name "$container" --systemd=always "${limits[@]}" "$image" >/dev/null 2>&1 ||
    fail "podman run"
inside() { pod exec -i "$container" "$@" </dev/null; }
# Until systemd is up, podman exec or systemctl fail (no container yet, no
# bus yet): retry for 30 s.
for _ in $(seq 150); do
    state=$(inside systemctl is-system-running --wait 2>&1 || true)
    [[ "$state" =~ ^(running|degraded|maintenance|stopping)$ ]] && break
    sleep 0.2
done
[ "$state" = running ] || fail "systemd is ${state:-not answering}: $(inside systemctl --failed --no-pager 2>&1; pod logs "$container" 2>&1 | tail -n 20)"
note "systemd is running with the package installed"

# What sprout answers to $2 on $1 (127.0.0.1:11301 or the unix socket), asked
# from inside the container.
ask_in() {
    pod exec -i "$container" python3 - "$1" "$2" <<'PY'
import socket, sys
addr = sys.argv[1]
if addr.startswith("/"):
    s = socket.socket(socket.AF_UNIX)
else:
    s = socket.socket()
    host, port = addr.rsplit(":", 1)
    addr = (host, int(port))
s.settimeout(10)
s.connect(addr)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode())
print(s.recv(4096).decode().split("\r\n")[0])
PY
}
show() { inside systemctl show -p "$1" --value "$2"; }

[ "$(show ActiveState sprout.socket)" = active ] || fail "sprout.socket is not active"
[ "$(show ActiveState sprout.service)" = active ] ||
    fail "sprout.service is not active: $(inside journalctl -u sprout --no-pager 2>&1 | tail)"
status=$(show StatusText sprout.service)
[ "$status" = "serving on 127.0.0.1:11301, unix:/run/sprout/sprout.sock" ] ||
    fail "status line: $status"
reply=$(ask_in 127.0.0.1:11301 'put 0 0 60 3\r\nabc\r\n')
[[ "$reply" == "INSERTED 1" ]] || fail "put over TCP answered: $reply"
reply=$(ask_in /run/sprout/sprout.sock 'stats-job 1\r\n')
[[ "$reply" == "OK "* ]] || fail "stats-job over the unix socket answered: $reply"
note "sprout.socket's two sockets serve; status: $status"

pid=$(show MainPID sprout.service)
proc=$(inside cat "/proc/$pid/status")
grep -Eq '^Uid:\s+[1-9]' <<<"$proc" || fail "sprout runs as root"
grep -Eq '^CapEff:\s+0+$' <<<"$proc" || fail "sprout has capabilities"
grep -Eq '^NoNewPrivs:\s+1$' <<<"$proc" || fail "no_new_privs is not set"
grep -Eq '^Seccomp:\s+2$' <<<"$proc" || fail "no seccomp filter"
note "hardening in force: $(grep -E '^(Uid|Seccomp_filters)' <<<"$proc" | tr -s '\t\n' '  ')"

inside systemctl restart sprout.service
reply=$(ask_in 127.0.0.1:11301 'stats-job 1\r\n')
[[ "$reply" == "OK "* ]] || fail "the job did not survive a restart: $reply"
# Type=notify: systemd logged "Started" only after sprout had recovered.
journal=$(inside journalctl -o cat --no-pager -u sprout.service)
recovered=$(grep -n 'recovered from /var/lib/sprout' <<<"$journal" | tail -n 1 | cut -d: -f1)
started=$(grep -n '^Started sprout.service' <<<"$journal" | tail -n 1 | cut -d: -f1)
[ -n "$recovered" ] && [ -n "$started" ] && [ "$recovered" -lt "$started" ] ||
    fail "READY came before recovery: $journal"
note "a job outlives a restart; systemd saw READY after recovery"

# (systemctl warns that the socket can start it again: that is the point.)
inside systemctl stop sprout.service 2>/dev/null
[ "$(show ActiveState sprout.service)" = inactive ] || fail "sprout.service did not stop"
[ "$(show Result sprout.service)" = success ] || fail "stop: $(show Result sprout.service)"
reply=$(ask_in 127.0.0.1:11301 'stats-job 1\r\n')
[[ "$reply" == "OK "* ]] || fail "a connection to the socket did not start sprout: $reply"
[ "$(show ActiveState sprout.service)" = active ] || fail "sprout.service was not activated"
note "systemctl stop ends it with success; a connection starts it again"
echo "systemd test: 1 passed, 0 failed"
