#!/usr/bin/env bash
# compare.sh: sprout against beanstalkd (or any two beanstalk servers), side by side.
#
# Why: this machine is small and shared, so one run of one server says little.
# The script runs every scenario of the load tool (benches/load.rs) alternately
# on server A and server B, a fresh server process each time, for several
# rounds, and reports medians and the A/B ratio of each round (min–max), plus
# the servers' CPU time per job, which noise on the client side does not move.
#
# Usage: benches/compare.sh [options]
#   --a-cmd CMD     server A (default: this tree's release build of sprout)
#   --b-cmd CMD     server B (default: /usr/bin/beanstalkd, installed with apt-get if missing)
#   --rounds N      rounds of A then B per scenario (default 3, at least 3)
#   --quick         about a fifth of the jobs (a run of about two minutes)
#   --durable       also run with `-b DIR` (default fsync policy) and `-b DIR -f 0`,
#                   and fill `-b DIR` with 10k and --fill-jobs jobs of 100 B and 1 KiB
#   --fill-only     only the memory rows (fill, ready and delayed; with
#                   --durable, the `-b` fills too)
#   --fill-jobs N   jobs each fill holds (default 1,000,000; 200,000 with --quick)
#   --out FILE      keep the raw JSON lines here (default: a temporary file)
#   --only REGEX    only the scenarios whose "MODE LABEL" matches (e.g. 'fsync0 pingpong')
#   --tls           only the TLS rows: put 50 conns, put 1 conn pipelined and
#                   pingpong, with A = sprout (--a-cmd) serving TLS
#                   (benches/tls-wrap.sh) against B = the same sprout in clear
#                   (mode tls: the cost of TLS), then against B = --b-cmd
#                   behind stunnel4 (benches/stunnel-wrap.sh; mode
#                   tls-stunnel: what beanstalkd's users run). Certificates
#                   are made with openssl; the load tool speaks TLS to the
#                   TLS sides (a wrapper names its load flags in the file
#                   BENCH_LOAD_ARGS names).
#   --auth          only the access-check rows: put 50 conns, put 1 conn
#                   pipelined and pingpong, with A = sprout (--a-cmd) under
#                   --auth with 100 principals (benches/auth-wrap.sh; every
#                   connection authenticates first) against B = the same
#                   sprout without --auth (mode auth).
# Each server is started as `CMD -l 127.0.0.1 -p PORT [-b DIR [-f 0]]`, so any
# beanstalkd-compatible server taking those flags (tuber, another rewrite) can
# be A or B. Prints a Markdown table.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
a_cmd=""
b_cmd=/usr/bin/beanstalkd
rounds=3
scale=5
durable=false
fill_only=false
fill_jobs=""
out=""
only=""
tls=false
auth=false

while (($#)); do
    case $1 in
        --a-cmd) a_cmd=$2; shift 2 ;;
        --b-cmd) b_cmd=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --quick) scale=1; shift ;;
        --durable) durable=true; shift ;;
        --fill-only) fill_only=true; shift ;;
        --fill-jobs) fill_jobs=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --tls) tls=true; shift ;;
        --auth) auth=true; shift ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
if ((rounds < 3)); then
    echo "compare.sh: --rounds must be at least 3" >&2
    exit 2
fi

cd "$repo"
if [[ -z $a_cmd ]]; then
    cargo build --release --quiet
    a_cmd=$target/release/sprout
fi
if [[ $b_cmd == /usr/bin/beanstalkd && ! -x $b_cmd ]]; then
    apt-get install -y beanstalkd >&2 || { apt-get update >&2 && apt-get install -y beanstalkd >&2; }
    # Debian starts the service on install; the script starts its own.
    systemctl stop beanstalkd 2>/dev/null || true
fi
if $tls && ! command -v stunnel4 >/dev/null; then
    apt-get install -y stunnel4 >&2 || { apt-get update >&2 && apt-get install -y stunnel4 >&2; }
fi
load=$(cargo bench --bench load --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
[[ -x $load ]] || { echo "compare.sh: could not build the load tool" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/compare.XXXXXX")
server_pid=""
cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
out=${out:-$work/results.jsonl}
: >"$out"

# make_certs DIR: a CA (ca.pem) and a certificate for 127.0.0.1 and
# localhost it signed (server.pem, server.key), EC P-256.
make_certs() {
    local dir=$1
    mkdir -p "$dir"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=bench-ca -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
        -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/san"
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 2 -extfile "$dir/san" -out "$dir/server.pem" 2>/dev/null
}
if $tls; then
    make_certs "$work/tls"
    export BENCH_TLS_DIR=$work/tls
fi

source "$repo/benches/servers.sh"

failures=0
# run MODE LABEL SIDE ROUND LOAD-ARGS...: one fresh server, one load run.
run() {
    local mode=$1 label=$2 side=$3 round=$4 cmd extra=()
    shift 4
    case $mode/$side in
        tls/A | tls-stunnel/A) cmd="env SPROUT=$a_cmd $repo/benches/tls-wrap.sh" ;;
        tls/B | auth/B) cmd=$a_cmd ;;
        auth/A) cmd="env SPROUT=$a_cmd $repo/benches/auth-wrap.sh" ;;
        tls-stunnel/B) cmd="$repo/benches/stunnel-wrap.sh $b_cmd" ;;
        */A) cmd=$a_cmd ;;
        */B) cmd=$b_cmd ;;
    esac
    case $mode in
        durable) extra=(-b "$work/data") ;;
        fsync0) extra=(-b "$work/data" -f 0) ;;
    esac
    rm -rf "$work/data" && mkdir -p "$work/data"
    # A server that needs other processes (benches/cluster-wrap.sh: its NATS
    # servers) names them here; their CPU is reported apart.
    : >"$work/helpers"
    : >"$work/load-args"
    BENCH_HELPER_PIDS=$work/helpers BENCH_LOAD_ARGS=$work/load-args start_server "$cmd" "${extra[@]}"
    local helpers=() load_args=() line prefix="{\"mode\":\"$mode\",\"label\":\"$label\",\"side\":\"$side\",\"round\":$round,"
    if [[ -s $work/helpers ]]; then helpers=(--helper-pids "$(cat "$work/helpers")"); fi
    if [[ -s $work/load-args ]]; then read -ra load_args <"$work/load-args"; fi
    if line=$("$load" "$@" --addr "127.0.0.1:$port" --pid "$server_pid" "${helpers[@]}" "${load_args[@]}" 2>"$work/load.err"); then
        echo "${line/#\{/$prefix}" >>"$out"
    else
        failures=$((failures + 1))
        # The server's own words on it outlive the run.
        local kept
        kept=$(mktemp "${TMPDIR:-/tmp}/compare-failed.XXXXXX.log")
        cp "$work/server.log" "$kept" 2>/dev/null || true
        echo "compare.sh: $mode $label $side round $round failed (server log: $kept): $(cat "$work/load.err")" >&2
        echo "${prefix}\"error\":$(python3 -c 'import json, sys; print(json.dumps(sys.stdin.read()))' <"$work/load.err")}" >>"$out"
    fi
    stop_server
    printf '.' >&2
}

# scenario MODE LABEL LOAD-ARGS...: every round, A then B.
scenario() {
    local mode=$1 label=$2 round
    shift 2
    if [[ -n $only && ! "$mode $label" =~ $only ]]; then return; fi
    for round in $(seq "$rounds"); do
        run "$mode" "$label" A "$round" "$@"
        run "$mode" "$label" B "$round" "$@"
    done
}

k=$((20000 * scale)) # jobs of a quick put; the default run has 5x as many
echo "A: $a_cmd" >&2
echo "B: $b_cmd" >&2
fill_jobs=${fill_jobs:-$((10 * k))}
# Each fill reads RSS right after it and again after $settle s idle, once
# sprout's heap trimmer (src/malloc.rs, every 5 s) has run: the first
# reading includes the heap the burst freed (~6 MB at 10k jobs with -b).
settle=6
if $tls || $auth; then
    modes=()
    if $tls; then modes+=(tls tls-stunnel); fi
    if $auth; then modes+=(auth); fi
    for mode in "${modes[@]}"; do
        scenario $mode "put, 50 conns" put --conns 50 --jobs $((5 * k))
        scenario $mode "put, 1 conn pipelined" put --conns 1 --jobs $((5 * k))
        scenario $mode "pingpong, 25+25 conns" pingpong --producers 25 --consumers 25 --jobs $((2 * k))
    done
else
if ! $fill_only; then
scenario memory "put, 50 conns" put --conns 50 --jobs $((5 * k))
scenario memory "put, 1 conn pipelined" put --conns 1 --jobs $((5 * k))
# What a client that waits for each reply (most do) sees.
scenario memory "put, 50 conns, window 1" put --conns 50 --window 1 --jobs $((5 * k))
scenario memory "drain, 50 conns" drain --conns 50 --jobs $((5 * k))
scenario memory "pingpong, 25+25 conns" pingpong --producers 25 --consumers 25 --jobs $((2 * k))
# At full speed the latency is the backlog over the throughput; at a rate both
# servers sustain it is the servers' own.
scenario memory "pingpong at 20k jobs/s" pingpong --producers 25 --consumers 25 --jobs $k --rate 20000
scenario memory "delayed 10k, 1 s" delayed --jobs 10000 --delay 1 --rate 10000
fi
scenario memory "fill, ready" fill --conns 50 --jobs "$fill_jobs" --settle $settle
scenario memory "fill, delayed" fill --conns 50 --jobs "$fill_jobs" --delay 3600 --settle $settle
if $durable && ! $fill_only; then
    for mode in durable fsync0; do
        if [[ $mode == fsync0 ]]; then n=$((k / 5)); else n=$((5 * k)); fi
        scenario $mode "put, 50 conns" put --conns 50 --jobs $n
        scenario $mode "put, 1 conn pipelined" put --conns 1 --jobs $n
        scenario $mode "drain, 50 conns" drain --conns 50 --jobs $n
        scenario $mode "pingpong, 25+25 conns" pingpong --producers 25 --consumers 25 --jobs $((n / 2))
    done
fi
if $durable; then
    # Memory held with -b: a small queue (where sled's fixed cost shows) and
    # a large one (where what each job costs shows), small and 1 KiB bodies.
    for size in 100 1024; do
        scenario durable "fill 10k, $size B" fill --conns 50 --jobs 10000 --size $size --settle $settle
        scenario durable "fill $fill_jobs, $size B" fill --conns 50 --jobs "$fill_jobs" --size $size --settle $settle
    done
fi
fi
echo >&2

if $auth; then
    echo "Auth rows: A = \`$a_cmd\` with --auth (100 principals, each connection authenticated) and B = the same without."
fi
if $tls; then
    echo "TLS rows: in mode tls, A = \`$a_cmd\` serving TLS and B = the same in clear;"
    echo "in mode tls-stunnel, A = \`$a_cmd\` serving TLS and B = \`$b_cmd\` behind stunnel4."
    echo
fi
python3 - "$out" "$a_cmd" "$b_cmd" "$settle" <<'EOF'
import json, statistics, sys

path, a_cmd, b_cmd, settle = sys.argv[1:]
runs = [json.loads(line) for line in open(path)]
groups = {}
for r in runs:
    groups.setdefault((r["mode"], r["label"]), {}).setdefault(r["side"], {})[r["round"]] = r

def med(rs, key):
    values = [r[key] for r in rs if key in r]
    return statistics.median(values) if values else None

def scaled(rs, key, divisor):
    v = med(rs, key)
    return None if v is None else v / divisor

def percentiles(rs):
    keys = ("latency_us_p50", "latency_us_p99", "latency_us_max")
    return "/".join(fmt(scaled(rs, key, 1e3), 2) for key in keys)

def fmt(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"

def ratio(rounds_a, rounds_b, key):
    """Median of A, B, and the A/B ratio with the min–max of per-round ratios."""
    per = [rounds_a[i][key] / rounds_b[i][key] for i in rounds_a
           if i in rounds_b and rounds_a[i].get(key) and rounds_b[i].get(key)]
    if not per:
        return "–"
    return f"{statistics.median(per):.2f} ({min(per):.2f}–{max(per):.2f})"

print(f"A = `{a_cmd}`, B = `{b_cmd}`; medians of {max(len(s.get('A', {})) for s in groups.values())} rounds, ratio A/B (min–max of the rounds)\n")
print("| mode | scenario | A jobs/s | B jobs/s | A/B | A CPU µs/job | B CPU µs/job | A/B CPU | notes |")
print("|---|---|---:|---:|---|---:|---:|---|---|")
failed = 0
for (mode, label), sides in groups.items():
    a, b = sides.get("A", {}), sides.get("B", {})
    errors = [r["error"].strip() for s in (a, b) for r in s.values() if "error" in r]
    failed += len(errors)
    ok_a = {i: r for i, r in a.items() if "error" not in r}
    ok_b = {i: r for i, r in b.items() if "error" not in r}
    ra, rb = list(ok_a.values()), list(ok_b.values())
    notes = []
    if any("latency_us_p99" in r for r in ra + rb):
        what = "lateness" if "delayed" in label else "put→reserve latency"
        notes.append(f"{what} p50/p99/max ms A {percentiles(ra)}, B {percentiles(rb)}")
        early = sum(r.get("early", 0) for r in ra + rb)
        if early:
            notes.append(f"**{early} early**")
    if label.startswith("fill"):
        notes.append(f"peak RSS MB A {fmt(scaled(ra, 'hwm_kb', 1024))}, "
                     f"B {fmt(scaled(rb, 'hwm_kb', 1024))}; "
                     f"RSS after MB A {fmt(scaled(ra, 'rss_kb', 1024), 1)}, "
                     f"B {fmt(scaled(rb, 'rss_kb', 1024), 1)}; "
                     f"after {settle} s idle A {fmt(scaled(ra, 'rss_settled_kb', 1024), 1)}, "
                     f"B {fmt(scaled(rb, 'rss_settled_kb', 1024), 1)}; "
                     f"bytes/job A {fmt(med(ra, 'rss_per_job'))}, B {fmt(med(rb, 'rss_per_job'))} "
                     f"(A/B {ratio(ok_a, ok_b, 'rss_per_job')})")
    notes.append(f"kernel CPU µs/job A {fmt(med(ra, 'sys_us_per_job'), 2)}, "
                 f"B {fmt(med(rb, 'sys_us_per_job'), 2)}")
    for side, rs in (("A", ra), ("B", rb)):
        if any("helper_cpu_us_per_job" in r for r in rs):
            notes.append(f"{side}'s helpers (NATS, stunnel) CPU µs/job {fmt(med(rs, 'helper_cpu_us_per_job'), 2)}")
    if errors:
        notes.append(f"**{len(errors)} failed**: {errors[0][:80]}")
    print(f"| {mode} | {label} | {fmt(med(ra, 'jobs_per_sec'))} | {fmt(med(rb, 'jobs_per_sec'))} "
          f"| {ratio(ok_a, ok_b, 'jobs_per_sec')} | {fmt(med(ra, 'cpu_us_per_job'), 2)} "
          f"| {fmt(med(rb, 'cpu_us_per_job'), 2)} | {ratio(ok_a, ok_b, 'cpu_us_per_job')} | {'; '.join(notes)} |")
sys.exit(1 if failed else 0)
EOF
