# Sourced by the benchmark scripts (compare.sh, recovery.sh, cluster-wrap.sh):
# free loopback ports, and one beanstalk server started and stopped at a time.
# The caller sets `work` (a scratch directory) before calling start_server.

# A loopback port nothing listens on, below Linux's ephemeral range (32768–).
free_port() {
    local port
    for _ in $(seq 100); do
        port=$((12000 + RANDOM % 20000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return
        fi
    done
    echo "no free port found" >&2
    return 1
}

# start_server CMD EXTRA...: starts `CMD -l 127.0.0.1 -p PORT EXTRA...` on a
# free port (three tries, in case another process takes the port first) and
# waits until it accepts; sets server_pid and port.
start_server() {
    local cmd=() try
    read -ra cmd <<<"$1"
    shift
    for try in 1 2 3; do
        port=$(free_port)
        "${cmd[@]}" -l 127.0.0.1 -p "$port" "$@" >"$work/server.log" 2>&1 &
        server_pid=$!
        for _ in $(seq 100); do
            if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return; fi
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.05
        done
        stop_server
    done
    echo "server '${cmd[*]} $*' did not start:" >&2
    cat "$work/server.log" >&2
    return 1
}

# stop_server [SIGNAL]: stops the server start_server started (SIGTERM by
# default; KILL for a crash).
stop_server() {
    kill "-${1:-TERM}" "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
}
