#!/usr/bin/env python3
"""Server-side instructions per contended hand-off, counted by callgrind (the `make bench`
section 2 loop, replayed in turn so that the counts repeat): N connections on one lock, each
one acquire -> release -> acquire again, the others waiting. Two forms of the waiters' words:

    raw      RLOCK.ACQUIRE key owner 30000 BLOCK 0                    (bench's raw clients)
    client   RLOCK.ACQUIRE key owner 30000 SESSION s QUEUE r 0 BLOCK 50  (the client's sync lock();
                                                                   60000 here: see words)

Each hand-off: the holder's RLOCK.RELEASE (which grants the next waiter in the same step, its
reply going to that waiter's connection), then the holder's next acquire, which queues. Counted
per hand-off, over HANDOFFS of them: the whole server's instructions (every event-loop turn),
its work (see WORK: the commands read and run, the parked connections' replies; the figure to
compare, the total moves with the timing of the driver's sends), and the command dispatcher's
inclusive count.

    scripts/handoff.py [clients] [handoffs]     (defaults 8, 2000; KEEP=1 keeps the dumps;
                                                 TIMEOUT_MS=ms: the client form's waits timed)
"""

import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import budget  # noqa: E402 (its connection, RESP writer, port and dump helpers)

OWNER = "6e3d30b7-83b1-433a-9335-5e8b9916d3ac:%d"
# The client form's wait deadline (0: none, as lock(); try_lock(wait) sends what is left of it).
TIMEOUT_MS = int(os.environ.get("TIMEOUT_MS", "0"))


def words(form, key, i, request):
    a = ["RLOCK.ACQUIRE", key, OWNER % i, 30000]
    if form == "raw":
        return a + ["BLOCK", 0]
    # The client parks 50 ms; under valgrind a waiter's turn comes later than that, and its
    # grant would go to the session instead: the same path with a longer park.
    return a + ["SESSION", "s", "QUEUE", request, TIMEOUT_MS, "BLOCK", 60000]


def run_form(conns, probe, pid, form, handoffs):
    n = len(conns)
    key = "contended:" + form
    request = [0]

    def queued(count):
        # Until the server has read the last acquire (each connection is read on its own).
        while True:
            info = probe.pipeline([["RLOCK.INFO", key]])[0]
            if info[info.index(b"waiters") + 1] >= count:
                return
            time.sleep(0.01)

    def acquire(i):
        request[0] += 1
        conns[i].sock.sendall(budget.resp(words(form, key, i, request[0])))

    # The first takes the lock, the others queue behind it in turn.
    acquire(0)
    assert conns[0].reply() == 1
    for i in range(1, n):
        acquire(i)
        queued(i)

    def loop(count, holder):
        for _ in range(count):
            conns[holder].sock.sendall(budget.resp(["RLOCK.RELEASE", key, OWNER % holder]))
            assert conns[holder].reply() == 0
            nxt = (holder + 1) % n
            got = conns[nxt].reply()
            if got != 1:
                sys.exit("handoff: %s: waiter %d got %r, not the grant" % (form, nxt, got))
            acquire(holder)
            holder = nxt
        return holder

    # A few turns unmeasured (every queue and table at its steady size), then the counted ones.
    holder = loop(3 * n, 0)
    # The last acquire queued before the counters are zeroed (the one sent last in the counted
    # loop may be read after the dump: one acquire in HANDOFFS).
    queued(n - 1)
    subprocess.run(["callgrind_control", "--zero", str(pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    holder = loop(handoffs, holder)
    budget.dump(pid, form)
    # Everyone out: the holder releases, each waiter in turn gets it and releases.
    for _ in range(n):
        conns[holder].sock.sendall(budget.resp(["RLOCK.RELEASE", key, OWNER % holder]))
        assert conns[holder].reply() == 0
        holder = (holder + 1) % n
        if _ < n - 1:
            assert conns[holder].reply() == 1


# The work of a hand-off: reading and running the commands, and the replies of parked
# connections (the other event-loop work, beforeSleep's and afterSleep's, depends on how the
# driver's sends fall into the server's turns: +-1,700 between runs of unchanged code).
WORK = ("readQueryFromClient", "moduleHandleBlockedClients")


def counts(path, handoffs):
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", path],
                          capture_output=True, text=True).stdout
    found = {}
    for line in text.splitlines():
        if "PROGRAM TOTALS" in line:
            found.setdefault("total", int(line.split()[0].replace(",", "")))
        for f in WORK + ("RedisModuleCommandDispatcher",):
            if re.search(r"[ :]%s( |$)" % f, line):
                found.setdefault(f, int(line.split()[0].replace(",", "")))
    work = sum(found.get(f, 0) for f in WORK)
    return (found["total"] // handoffs, work // handoffs,
            found.get("RedisModuleCommandDispatcher", 0) // handoffs)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    handoffs = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    module = os.environ.get("RLOCK_MODULE",
                            os.path.join(budget.ROOT, "target/release/librlock_module.so"))
    server = os.environ.get("RLOCK_SERVER") or "redis-server"
    work = tempfile.mkdtemp(prefix="rlock-handoff-")
    vg, first = budget.start_server(work, module, server, "handoff")
    port = first.port
    try:
        conns = [first] + [budget.Conn(port) for _ in range(n - 1)]
        probe = budget.Conn(port)
        # The session lives while its listener is parked in a read, as the client's is.
        listener = budget.Conn(port)
        listener.pipeline([["RSESSION.OPEN", "s", 60000]])
        listener.sock.sendall(budget.resp(["RSESSION.READ", "s", 0, "BLOCK", 0]))
        for form in ("raw", "client"):
            run_form(conns, probe, vg.pid, form, handoffs)
        info = probe.pipeline([["RSESSION.INFO", "s"]])[0]
        budget.stop_server(vg, first)
    finally:
        if vg.poll() is None:
            vg.kill()
    if isinstance(info, list) and info[info.index(b"queued") + 1] != 0:
        print("handoff: warning: the session has requests queued: %r" % info, file=sys.stderr)
    print("server instructions per hand-off (callgrind, %d clients, %d hand-offs):"
          % (n, handoffs))
    print("%-8s %10s %10s %12s" % ("form", "total", "work", "dispatcher"))
    for form in ("raw", "client"):
        f = [p for p in os.listdir(work) if p.startswith("cg.out")
             and "desc: Trigger: dump %s\n" % form in open(os.path.join(work, p), errors="replace").read(4096)]
        print("%-8s %10d %10d %12d" % ((form,) + counts(os.path.join(work, f[0]), handoffs)))
    if os.environ.get("KEEP"):
        print("dumps kept in", work)
    else:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
