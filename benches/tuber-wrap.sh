#!/bin/sh
# Starts tuber with beanstalkd's flags: -l ADDR -p PORT [-b DIR [-f MS]] [-z BYTES] [-V].
# beanstalkd's `-f MS` (fsync at most every MS ms; -f 0 = fsync every write)
# becomes tuber's `--wal-sync-interval MSms`. Without -f, tuber's own default
# applies (100ms; beanstalkd's is 50ms). beanstalkd's -F (never fsync) has no
# tuber equivalent and is refused. exec keeps the pid tuber's.
# TUBER: the tuber binary (build tuberq/tuber with cargo build --release).
TUBER=${TUBER:-tuber}
set -- "$@" --end--
while [ "$1" != --end-- ]; do
    case $1 in
        -f) set -- "$@" --wal-sync-interval "${2}ms"; shift 2 ;;
        -f*) set -- "$@" --wal-sync-interval "${1#-f}ms"; shift ;;
        -F) echo "tuber-wrap.sh: tuber has no never-fsync mode (-F)" >&2; exit 2 ;;
        -l|-p|-b|-z) set -- "$@" "$1" "$2"; shift 2 ;;
        *) set -- "$@" "$1"; shift ;;
    esac
done
shift
exec "$TUBER" server "$@"
