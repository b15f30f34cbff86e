#!/usr/bin/env bash
# Starts sprout with --auth and a policy of 100 principals: compare.sh's A
# side for the auth rows (`compare.sh --auth`). The load tool authenticates
# as the last principal (every principal's grants on its own tubes, the
# last one's on every tube), so each check looks through a policy of
# realistic size. Writes `--auth-token-file FILE` to the file
# BENCH_LOAD_ARGS names; passes every flag on. exec keeps the pid sprout's.
# SPROUT: the binary (default: this tree's release build).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
sprout=${SPROUT:-${CARGO_TARGET_DIR:-$here/target}/release/sprout}
dir=$(mktemp -d "${TMPDIR:-/tmp}/auth-wrap.XXXXXX")
policy=$dir/policy.toml
: >"$policy"
for i in $(seq 1 100); do
    token=$(printf "bench-token-%032d" "$i")
    hash=$(printf '%s' "$token" | "$sprout" hash-token)
    if ((i == 100)); then
        tubes='"*"'
    else
        tubes="\"team$i.*\""
    fi
    cat >>"$policy" <<EOF
[[principal]]
name = "p$i"
tokens = ["$hash"]
grants = [{ tubes = [$tubes], actions = ["produce", "consume", "inspect", "admin"] }]

EOF
done
printf "bench-token-%032d\n" 100 >"$dir/token"
if [[ -n ${BENCH_LOAD_ARGS:-} ]]; then
    echo "--auth-token-file $dir/token" >"$BENCH_LOAD_ARGS"
fi
exec "$sprout" --auth "$policy" "$@"
