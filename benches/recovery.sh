#!/usr/bin/env bash
# recovery.sh: how long beanstalk servers take to come back after kill -9
# holding many jobs, side by side.
#
# Each round, for each server in turn: a fresh `-b DIR`, `load fill` puts the
# jobs (100-byte bodies, 50 connections), kill -9, then the server is
# started again on DIR and timed from exec until `stats` first answers; the
# jobs it then holds short of those put are reported as lost. Also reports the CPU time it used until then (threads
# included), its RSS then and its peak RSS (recovery's own: the process is
# new), and the directory's size. The machine is shared:
# the CPU time is the figure other work moves least.
#
# With --drain, the restarted server is then drained (`load drain --no-fill`,
# 50 connections, one command in flight each): every body is cold (with
# `-b`, sprout reads it back from the disk), and the reserve round trip's
# p50/p99/max is reported beside the drain's rate.
#
# With --delay, the jobs are put delayed by that many seconds; after the
# restart the drain (if asked for) starts once none is delayed any more, so
# its reserves take jobs that came due in the recovered server.
#
# Usage: benches/recovery.sh [--jobs N] [--rounds R] [--size B] [--drain] [--out FILE] CMD...
#   CMD       a server taking beanstalkd's `-l ADDR -p PORT -b DIR` (quote
#             extra flags with it: 'sprout -f 0'); the first is the baseline
#             of the ratios. Default: this tree's release sprout,
#             beanstalkd 1.12 (/usr/bin/beanstalkd).
#   --jobs    jobs held at the kill (default 1,000,000)
#   --rounds  rounds of every server in turn (default 3)
#   --size    body bytes (default 100)
#   --drain   drain the restarted server, timing each reserve
#   --delay   put the jobs delayed by this many seconds (default 0)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
jobs=1000000
rounds=3
size=100
drain=false
delay=0
out=""
cmds=()
while (($#)); do
    case $1 in
        --jobs) jobs=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --drain) drain=true; shift ;;
        --delay) delay=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "recovery.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) cmds+=("$1"); shift ;;
    esac
done
cd "$repo"
if ((${#cmds[@]} == 0)); then
    cargo build --release --quiet
    cmds=("$target/release/sprout" /usr/bin/beanstalkd)
fi
load=$(cargo bench --bench load --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
[[ -x $load ]] || { echo "recovery.sh: could not build the load tool" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/recovery.XXXXXX")
server_pid=""
trap '[[ -z $server_pid ]] || kill -9 "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
out=${out:-$work/results.jsonl}
: >"$out"
source "$repo/benches/servers.sh"

for round in $(seq "$rounds"); do
    for side in "${!cmds[@]}"; do
        cmd=${cmds[$side]}
        rm -rf "$work/data" && mkdir -p "$work/data"
        start_server "$cmd" -b "$work/data"
        fill=$("$load" fill --conns 50 --jobs "$jobs" --size "$size" --delay "$delay" \
            --addr "127.0.0.1:$port" --pid "$server_pid" | tail -1)
        stop_server KILL
        port=$(free_port)
        # Started and timed by Python, so the clock starts at exec.
        python3 - "$cmd" "$port" "$work/data" "$jobs" "$side" "$round" "$drain" "$load" "$fill" >>"$out" <<'PY'
import json, os, shlex, socket, subprocess, sys, time
cmd, port, data, jobs, side, round_, drain, load, fill = sys.argv[1:]
fill = json.loads(fill)
argv = shlex.split(cmd) + ["-l", "127.0.0.1", "-p", port, "-b", data]
start = time.monotonic()
server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def held_jobs():
    """(current-jobs-ready, current-jobs-delayed) from `stats` (its reply:
    OK <bytes>, YAML), or None while the server does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as s:
            s.sendall(b"stats\r\n")
            got = b""
            while b"\r\n" not in got or len(got) < got.index(b"\r\n") + 2 + int(got.split()[1]) + 2:
                more = s.recv(65536)
                if not more:
                    return None
                got += more
    except (OSError, IndexError, ValueError):
        return None
    fields = dict(l.split(": ", 1) for l in got.decode().splitlines() if ": " in l)
    try:
        return int(fields["current-jobs-ready"]), int(fields["current-jobs-delayed"])
    except (KeyError, ValueError):
        return None
# Servers answer once recovery is done (sprout listens before, but accepts
# after): the first answer is the time.
while (held := held_jobs()) is None:
    if server.poll() is not None:
        sys.exit(f"recovery.sh: {cmd} exited with {server.returncode}")
    time.sleep(0.005)
secs = time.monotonic() - start
stat = open(f"/proc/{server.pid}/stat").read().rsplit(")", 1)[1].split()
cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
status = {l.split(":")[0]: l.split()[1] for l in open(f"/proc/{server.pid}/status") if l.startswith("Vm")}
rss, hwm = int(status["VmRSS"]), int(status["VmHWM"])
disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
row = {"side": int(side), "round": int(round_), "secs": secs, "cpu": cpu, "lost": int(jobs) - sum(held),
       "rss_kb": rss, "hwm_kb": hwm, "disk": disk, "fill_jobs_per_sec": fill["jobs_per_sec"], "fill_rss_kb": fill["rss_kb"]}
if drain == "true":
    while (held := held_jobs())[1] > 0:
        time.sleep(1)
    out = subprocess.run([load, "drain", "--no-fill", "--conns", "50", "--window", "1", "--jobs", str(held[0]),
                          "--addr", f"127.0.0.1:{port}", "--pid", str(server.pid)],
                         check=True, capture_output=True, text=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    row.update({k: got[k] for k in ("jobs_per_sec", "latency_us_p50", "latency_us_p99", "latency_us_max")})
server.kill()
server.wait()
print(json.dumps(row))
PY
        printf '.' >&2
    done
done
echo >&2

python3 - "$out" "${cmds[@]}" <<'EOF'
import json, statistics, sys
path, *cmds = sys.argv[1:]
runs = [json.loads(l) for l in open(path)]
by = {}
for r in runs:
    by.setdefault(r["side"], {})[r["round"]] = r
base = by[0]
print(f"{len(base)} rounds; recovery = exec until `stats` first answers; ratio to the first server per round (min–max)\n")
drained = all("jobs_per_sec" in r for r in runs)
extra = " cold drain jobs/s | reserve µs p50 / p99 / max |" if drained else ""
print("| server | fill jobs/s | RSS after fill MB | recovery s (min–max) | ratio | CPU s (min–max) | CPU ratio | RSS after MB | peak RSS MB | disk MB | jobs lost |" + extra)
print("|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|" + ("---:|---|" if drained else ""))
for side, cmd in enumerate(cmds):
    rs = by.get(side, {})
    secs = [r["secs"] for r in rs.values()]
    cpu = [r["cpu"] for r in rs.values()]
    def ratio(key):
        per = [rs[i][key] / base[i][key] for i in rs if i in base and base[i][key]]
        return f"{statistics.median(per):.2f} ({min(per):.2f}–{max(per):.2f})" if per else "–"
    print(f"| `{cmd}` | {statistics.median(r['fill_jobs_per_sec'] for r in rs.values()):,.0f} "
          f"| {statistics.median(r['fill_rss_kb'] for r in rs.values()) / 1024:.0f} "
          f"| {statistics.median(secs):.2f} ({min(secs):.2f}–{max(secs):.2f}) "
          f"| {ratio('secs')} | {statistics.median(cpu):.2f} ({min(cpu):.2f}–{max(cpu):.2f}) "
          f"| {ratio('cpu')} "
          f"| {statistics.median(r['rss_kb'] for r in rs.values()) / 1024:.0f} "
          f"| {statistics.median(r['hwm_kb'] for r in rs.values()) / 1024:.0f} "
          f"| {statistics.median(r['disk'] for r in rs.values()) / 2**20:.0f} "
          f"| {'/'.join(str(r['lost']) for r in rs.values())} |"
          + (f" {statistics.median(r['jobs_per_sec'] for r in rs.values()):,.0f} "
             f"| {statistics.median(r['latency_us_p50'] for r in rs.values()):.0f} / "
             f"{statistics.median(r['latency_us_p99'] for r in rs.values()):.0f} / "
             f"{max(r['latency_us_max'] for r in rs.values()):.0f} |" if drained else ""))
EOF
