"""A real beanstalk client from PyPI (greenstalk) against the sprout binary.

Usage: python greenstalk_smoke.py PATH_TO_SPROUT

Starts the server on a free loopback port and drives a short worker
scenario through greenstalk's public API; any mismatch raises.
"""

import socket
import subprocess
import sys
import time

import greenstalk


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, port):
    proc = subprocess.Popen([binary, "-l", "127.0.0.1", "-p", str(port)])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise SystemExit("sprout did not start listening within 5 s")


def scenario(port):
    with greenstalk.Client(("127.0.0.1", port), use="emails", watch="emails") as c:
        low = c.put("low", priority=100)
        high = c.put("high", priority=1)
        job = c.reserve(timeout=1)
        assert (job.id, job.body) == (high, "high"), job
        c.bury(job, priority=1)
        assert c.peek_buried().id == high
        assert c.kick(10) == 1
        job = c.reserve(timeout=1)
        assert job.id == high, job
        c.delete(job)
        job = c.reserve(timeout=1)
        assert job.id == low, job
        c.release(job, delay=1)
        assert c.stats_job(low)["state"] == "delayed"
        try:
            c.reserve(timeout=0)
            raise AssertionError("a delayed job was reserved early")
        except greenstalk.TimedOutError:
            pass
        job = c.reserve(timeout=3)
        assert job.id == low and c.stats_job(low)["releases"] == 1
        c.delete(job)
        stats = c.stats()
        assert stats["current-jobs-ready"] == 0 and stats["cmd-put"] == 2, stats
        assert c.stats_tube("emails")["total-jobs"] == 2
        assert "emails" in c.tubes()


def main():
    port = free_port()
    proc = start(sys.argv[1], port)
    try:
        scenario(port)
    finally:
        proc.terminate()
        proc.wait(timeout=5)
    print("greenstalk smoke: 1 passed, 0 failed")


if __name__ == "__main__":
    main()
