#!/usr/bin/env bash
# Starts sprout with its beanstalk port over TLS: compare.sh's A side for
# the TLS rows (`compare.sh --tls`). Takes compare.sh's `-l ADDR -p PORT`
# and serves TLS on ADDR:PORT (and no plain listener) with the certificate
# in BENCH_TLS_DIR (server.pem, server.key; ca.pem signed it), passing the
# other flags on. It writes `--tls BENCH_TLS_DIR/ca.pem` to the file
# BENCH_LOAD_ARGS names, so compare.sh runs the load tool over TLS. exec
# keeps the pid sprout's.
# SPROUT: the binary (default: this tree's release build).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
sprout=${SPROUT:-${CARGO_TARGET_DIR:-$here/target}/release/sprout}
dir=${BENCH_TLS_DIR:?tls-wrap.sh: BENCH_TLS_DIR names no directory of certificates}
addr=127.0.0.1 port=11300 args=()
while (($#)); do
    case $1 in
        -l) addr=$2; shift 2 ;;
        -p) port=$2; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
if [[ -n ${BENCH_LOAD_ARGS:-} ]]; then
    echo "--tls $dir/ca.pem" >"$BENCH_LOAD_ARGS"
fi
exec "$sprout" --tls-listen "$addr:$port" \
    --tls-cert "$dir/server.pem" --tls-key "$dir/server.key" "${args[@]}"
