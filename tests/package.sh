#!/usr/bin/env bash
# The Debian package, for real: builds it with cargo-deb (installed from
# crates.io when missing), installs it with dpkg -i, checks its files, user,
# state directory and units (systemd-analyze verify), starts the packaged
# binary as the sprout user with the packaged /etc/default/sprout, then
# removes and purges it and puts the machine back as it was.
#
# Needs root and dpkg. Without them it prints a note and passes, except
# under CI=true, where it fails. It refuses to touch a machine where a
# sprout package or user already exists.
set -euo pipefail
cd "$(dirname "$0")/.."

name="package test"
# shellcheck source=tests/lib.sh
. tests/lib.sh

[ "$(id -u)" = 0 ] || unavailable "needs root (dpkg -i)"
command -v dpkg >/dev/null || unavailable "dpkg is not installed"
command -v systemd-analyze >/dev/null || unavailable "systemd-analyze is not installed"
if [ "$(dpkg-query -W -f '${Status}' sprout 2>/dev/null || true)" = "install ok installed" ]; then
    unavailable "a sprout package is installed already; not touching it"
fi
if getent passwd sprout >/dev/null || [ -e /var/lib/sprout ]; then
    unavailable "a sprout user or /var/lib/sprout exists already; not touching it"
fi
if ! cargo deb --version >/dev/null 2>&1; then
    note "installing cargo-deb from crates.io"
    cargo install --locked --quiet cargo-deb@3.8.0
fi

cleanup() {
    [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
    dpkg -P sprout >/dev/null 2>&1 || true
    rm -rf /var/lib/sprout
    if getent passwd sprout >/dev/null; then userdel sprout; fi
    if getent group sprout >/dev/null; then groupdel sprout; fi
}
trap cleanup EXIT

# One dpkg at a time on this machine (other worktrees run this test too).
exec 9>/tmp/sprout-package-test.lock
flock 9

# The shipped build ([profile.dist]: fat LTO, stripped), as the container's.
deb=$(cargo deb --profile dist --quiet | tail -n 1)
[ -f "$deb" ] || fail "cargo deb printed no package path: $deb"
note "built $deb ($(du -h "$deb" | cut -f1))"

contents=$(dpkg-deb --contents "$deb")
for path in ./usr/bin/sprout ./etc/default/sprout ./usr/share/doc/sprout/README.md \
    ./usr/share/doc/sprout/docs/security.md ./usr/share/doc/sprout/docs/dashboard.png \
    ./usr/lib/systemd/system/sprout.service ./usr/lib/systemd/system/sprout.socket; do
    grep -q " $path\$" <<<"$contents" || fail "$path is not in the package"
done
# Every file the units name as their Documentation= is in the package.
for doc in $(sed -n 's|^Documentation=file://||p' dist/systemd/sprout.service dist/systemd/sprout.socket); do
    grep -q " .$doc\$" <<<"$contents" || fail "Documentation=$doc is not in the package"
done
dpkg-deb --field "$deb" Depends | grep -q adduser || fail "no Depends on adduser"
dpkg-deb --field "$deb" Conflicts | grep -q . && fail "the package conflicts with something"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles | grep -qx /etc/default/sprout ||
    fail "/etc/default/sprout is not a conffile"

dpkg -i "$deb" >/dev/null
note "installed"
/usr/bin/sprout -v | grep -q "$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)" ||
    fail "the installed binary prints another version"
IFS=: read -r _ _ uid _ _ home shell < <(getent passwd sprout) || fail "no sprout user"
[ "$uid" -lt 1000 ] || fail "sprout is not a system user (uid $uid)"
[ "$home" = /var/lib/sprout ] || fail "sprout's home is $home"
case "$shell" in */nologin | */false) ;; *) fail "sprout can log in ($shell)" ;; esac
[ "$(stat -c '%U:%G %a' /var/lib/sprout)" = "sprout:sprout 750" ] ||
    fail "/var/lib/sprout is $(stat -c '%U:%G %a' /var/lib/sprout)"
out=$(systemd-analyze verify /usr/lib/systemd/system/sprout.service /usr/lib/systemd/system/sprout.socket 2>&1) ||
    fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify: $out"
# Enabled as cargo-deb's scripts do it (deb-systemd-helper), even with no
# systemd running here to start it.
[ -L /etc/systemd/system/multi-user.target.wants/sprout.service ] ||
    fail "sprout.service is not enabled"
[ -L /etc/systemd/system/sockets.target.wants/sprout.socket ] ||
    fail "sprout.socket is not enabled"
note "files, user, /var/lib/sprout and units are as they should be"

# The packaged binary, as the sprout user, with the packaged settings: only
# the port changes (11301 may be taken on a shared machine).
port=$(free_port)
(
    set -a
    # shellcheck disable=SC1091
    . /etc/default/sprout
    SPROUT_PORT=$port
    exec setpriv --reuid=sprout --regid=sprout --init-groups /usr/bin/sprout
) 2>/tmp/sprout-package-test.log &
pid=$!
reply=$(ask "$port" 'put 0 0 60 8\r\npackaged\r\n') || fail "the packaged service did not answer: $(cat /tmp/sprout-package-test.log)"
[[ "$reply" == "INSERTED "* ]] || fail "put answered $reply"
kill -TERM "$pid"
wait "$pid" || fail "sprout exited $? after SIGTERM: $(cat /tmp/sprout-package-test.log)"
pid=
owners=$(find /var/lib/sprout -mindepth 1 -printf '%u\n' | sort -u)
[ "$owners" = sprout ] || fail "/var/lib/sprout holds files of: $owners"
note "the packaged service kept a job in /var/lib/sprout as user sprout"

dpkg -i "$deb" >/dev/null || fail "reinstalling over itself failed"
dpkg -r sprout >/dev/null
[ ! -e /usr/bin/sprout ] || fail "/usr/bin/sprout is left after dpkg -r"
[ -e /etc/default/sprout ] || fail "dpkg -r removed the conffile"
dpkg -P sprout >/dev/null
[ ! -e /etc/default/sprout ] || fail "/etc/default/sprout is left after purge"
[ -d /var/lib/sprout ] || fail "purge deleted the jobs in /var/lib/sprout"
note "removed and purged (the jobs in /var/lib/sprout stay)"
echo "package test: 1 passed, 0 failed"
