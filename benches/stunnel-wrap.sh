#!/usr/bin/env bash
# Starts a beanstalk server behind Debian's stunnel4, which is how
# beanstalkd's users get TLS today: compare.sh's B side for its TLS rows
# (`compare.sh --tls --b-cmd /work/bin/beanstalkd-1.13`).
#   stunnel-wrap.sh SERVER -l ADDR -p PORT [FLAGS...]
# SERVER listens on a free loopback port with FLAGS; stunnel accepts TLS
# on ADDR:PORT with the certificate in BENCH_TLS_DIR (server.pem,
# server.key) and forwards each connection there, TCP_NODELAY on both
# sides (as sprout sets it on its sockets). stunnel starts once SERVER
# accepts, so ADDR:PORT accepting means both are up. exec keeps the pid
# SERVER's; stunnel's goes to the file BENCH_HELPER_PIDS names (compare.sh
# reports its CPU apart) and `--tls BENCH_TLS_DIR/ca.pem` to the file
# BENCH_LOAD_ARGS names. stunnel and its files go when SERVER does.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
tls=${BENCH_TLS_DIR:?stunnel-wrap.sh: BENCH_TLS_DIR names no directory of certificates}
server=$1
shift
addr=127.0.0.1 port=11300 args=()
while (($#)); do
    case $1 in
        -l) addr=$2; shift 2 ;;
        -p) port=$2; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
source "$here/benches/servers.sh"
inner=$(free_port)
dir=$(mktemp -d "${TMPDIR:-/tmp}/stunnel-wrap.XXXXXX")
cat >"$dir/stunnel.conf" <<CONF
foreground = yes
pid =
syslog = no
output = $dir/stunnel.log
socket = l:TCP_NODELAY=1
socket = r:TCP_NODELAY=1
[beanstalk]
accept = $addr:$port
connect = 127.0.0.1:$inner
cert = $tls/server.pem
key = $tls/server.key
CONF
(
    for _ in $(seq 200); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$inner") 2>/dev/null; then break; fi
        sleep 0.02
    done
    exec stunnel4 "$dir/stunnel.conf"
) </dev/null >/dev/null 2>&1 &
proxy=$!
# In a session of its own, so that a kill of the server's process group
# leaves it to stop stunnel.
setsid bash -c '
    while kill -0 "$1" 2>/dev/null; do sleep 0.2; done
    kill "$2" 2>/dev/null
    rm -rf "$3"
' watcher "$$" "$proxy" "$dir" </dev/null >/dev/null 2>&1 &
if [[ -n ${BENCH_HELPER_PIDS:-} ]]; then echo "$proxy" >"$BENCH_HELPER_PIDS"; fi
if [[ -n ${BENCH_LOAD_ARGS:-} ]]; then echo "--tls $tls/ca.pem" >"$BENCH_LOAD_ARGS"; fi
exec "$server" -l 127.0.0.1 -p "$inner" "${args[@]}"
