#!/usr/bin/env bash
# failover.sh: how soon a cluster serves again after a kill -9 of its
# leader, and whether a loaded leader keeps its lease: the cluster tests'
# harness (3 nats-server + 3 sprout nodes on loopback, producers,
# consumers and a kicker through every node) run by hand, with the
# binary's own default lease unless --lease is given.
#
#   kills: `tests/cluster.rs`'s a_killed_leader_is_replaced, the leader
#          killed N times in a row (restarted as a standby after each);
#          each time, from the kill to the first put acknowledged through a
#          surviving node (tried every 20 ms). Prints p50, p99, max, and
#          checks every acknowledged job.
#   soak:  `tests/cluster_stall.rs`'s a_leader_stopped_briefly, under load
#          for SECS, the leader stopped (SIGSTOP) for 300 ms every 2 s;
#          prints the takeovers (spurious: the leader never died) and
#          checks every acknowledged job.
#
# Usage: benches/failover.sh kills [--kills N] [--binary PATH] [--lease MS]
#        benches/failover.sh soak [--secs SECS] [--binary PATH] [--lease MS]
#   --binary  the sprout the nodes run (default: this tree's release build)
#   --lease   --cluster-lease-ms (default: the binary's own default)
#   --kills   default 20; --secs default 600
# The figures move with the machine's load: say under which beside them.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
mode=${1:-}
shift || true
kills=20 secs=600 binary="" lease=""
while (($#)); do
    case $1 in
        --kills) kills=$2; shift 2 ;;
        --secs) secs=$2; shift 2 ;;
        --binary) binary=$2; shift 2 ;;
        --lease) lease=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "failover.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
cd "$repo"
if [[ -z $binary ]]; then
    cargo build --release --quiet --bin sprout
    binary=$target/release/sprout
fi
if [[ -z $lease ]]; then
    lease=$("$binary" --help | sed -n '/--cluster-lease-ms/,/default:/p' |
        grep -o 'default: [0-9]*' | grep -o '[0-9]*')
fi
export SPROUT_TEST_BINARY=$binary SPROUT_CLUSTER_LEASE_MS=$lease
export SPROUT_NATS_SERVER=${SPROUT_NATS_SERVER:-$repo/target/nats/bin/nats-server}
echo "failover.sh $mode: $binary, lease $lease ms, load average $(cut -d' ' -f1-3 /proc/loadavg)"
log=$(mktemp)
case $mode in
    kills)
        SPROUT_CLUSTER_KILLS=$kills cargo test --quiet --test cluster \
            a_killed_leader_is_replaced -- --nocapture 2>&1 | tee "$log" |
            grep -E 'service back|checked|test result' || true
        # The test prints Rust durations: 1.39s, 812.3ms.
        grep 'service back' "$log" | sed 's/.*: \[//; s/\]//' | tr ',' '\n' |
            python3 -c '
import sys
def secs(d):
    d = d.strip()
    for unit, f in (("ms", 1e-3), ("µs", 1e-6), ("s", 1.0)):
        if d.endswith(unit):
            return float(d[: -len(unit)]) * f
t = sorted(secs(l) for l in sys.stdin if l.strip())
q = lambda p: t[min(len(t) - 1, int(p * len(t)))]
print(f"{len(t)} kills: p50 {q(0.5):.3f} s, p99 {q(0.99):.3f} s, max {t[-1]:.3f} s, min {t[0]:.3f} s")'
        ;;
    soak)
        SPROUT_CLUSTER_SOAK_SECS=$secs cargo test --quiet --test cluster_stall \
            a_leader_stopped_briefly -- --nocapture 2>&1 | tee "$log" |
            grep -E 'takeovers|checked|test result|panicked' || true
        ;;
    *) echo "failover.sh: kills or soak (see --help)" >&2; exit 2 ;;
esac
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); full output: $log"
