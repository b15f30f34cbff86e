#!/usr/bin/env bash
# Starts a sprout cluster leader on three fresh nats-server nodes (loopback,
# `sync_interval: always`, R3): compare.sh's A side for cluster mode
# (`--a-cmd benches/cluster-wrap.sh`). Takes compare.sh's `-l ADDR -p PORT`
# and ignores `-b DIR` and `-f MS` (a cluster reply always waits for a
# quorum of the NATS servers), so compare.sh's fsync0 rows compare it with
# the other side's `-f 0`. exec keeps the pid sprout's, so compare.sh's CPU
# figures are sprout's; the NATS servers' pids go to the file
# BENCH_HELPER_PIDS names (comma-separated), which compare.sh passes to the
# load tool to report their CPU apart. The NATS servers and their files go
# when sprout does.
# SPROUT: the binary (default: this tree's release build); NATS_SERVER: the
# nats-server (default: target/nats/bin/nats-server, from tests/run.sh);
# CLUSTER_COPY=1 keeps `-b DIR`: the node's copy of the pages on its disk,
# bodies off RAM (issue 33), so a run of each shows what the copy costs.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
sprout=${SPROUT:-${CARGO_TARGET_DIR:-$here/target}/release/sprout}
nats=${NATS_SERVER:-$here/target/nats/bin/nats-server}
args=() own_port=""
while (($#)); do
    case $1 in
        -b) [[ ${CLUSTER_COPY:-} == 1 ]] && args+=("$1" "$2"); shift 2 ;;
        -f) shift 2 ;;
        -p) own_port=$2; args+=("$1" "$2"); shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
source "$here/benches/servers.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/cluster-wrap.XXXXXX")
# sprout binds its port only once the NATS servers are up: none of them
# may take it meanwhile (a client would then get NATS's INFO line).
nats_port() {
    local port
    while port=$(free_port) && [[ $port == "$own_port" ]]; do :; done
    echo "$port"
}
client=() route=() monitor=()
for i in 0 1 2; do
    client+=("$(nats_port)") route+=("$(nats_port)") monitor+=("$(nats_port)")
done
routes="nats://127.0.0.1:${route[0]}, nats://127.0.0.1:${route[1]}, nats://127.0.0.1:${route[2]}"
pids=()
for i in 0 1 2; do
    mkdir -p "$dir/n$i"
    cat >"$dir/n$i.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:${client[$i]}
http: 127.0.0.1:${monitor[$i]}
cluster { name: bench, listen: 127.0.0.1:${route[$i]}, routes: [$routes] }
jetstream { store_dir: "$dir/n$i", sync_interval: always }
EOF
    "$nats" -c "$dir/n$i.conf" >"$dir/n$i.log" 2>&1 &
    pids+=($!)
done
for i in 0 1 2; do
    for _ in $(seq 300); do
        curl -sf "http://127.0.0.1:${monitor[$i]}/healthz" >/dev/null && break
        sleep 0.05
    done
done
# The watcher gets a session of its own, so that a kill of sprout's process
# group (as compare.sh may send) leaves it to remove the NATS servers.
setsid bash -c '
    while kill -0 "$1" 2>/dev/null; do sleep 0.2; done
    shift
    dir=$1
    shift
    kill -9 "$@" 2>/dev/null
    rm -rf "$dir"
' watcher "$$" "$dir" "${pids[@]}" </dev/null >/dev/null 2>&1 &
if [[ -n ${BENCH_HELPER_PIDS:-} ]]; then
    (IFS=,; echo "${pids[*]}") >"$BENCH_HELPER_PIDS"
fi
urls="nats://127.0.0.1:${client[0]},nats://127.0.0.1:${client[1]},nats://127.0.0.1:${client[2]}"
exec "$sprout" --cluster "$urls" --cluster-name bench --node-id bench "${args[@]}"
