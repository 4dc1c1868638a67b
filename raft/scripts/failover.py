#!/usr/bin/env python3
"""Time to a new leader after `kill -9` of the leader of three kv_node processes on loopback.

    cargo build --release -p bloomkv-raft --example kv_node
    python3 raft/scripts/failover.py [ROUNDS]

Each round waits a second of steady heartbeats, kills the leader, polls the others'
/cluster/status every 5 ms until one leads in a newer term, then until a PUT succeeds on it,
and restarts the killed node from its directory before the next round.
"""
import os, signal, sys, time

from kvcluster import Cluster

c = Cluster(os.environ.get("FAILOVER_DIR", "/tmp/kv-failover"), 22000, [1, 2, 3])
c.form([1, 2, 3], level="off")
c.req(1, "/kv/a", "PUT", b"x")
results = []
for round in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    s = c.status(1) or c.status(2) or c.status(3)
    leader = s["leader"]
    term = s["term"]
    time.sleep(1.0)  # steady state: heartbeats flowing
    c.procs[leader].send_signal(signal.SIGKILL); c.procs[leader].wait()
    t0 = time.monotonic()
    others = [n for n in (1, 2, 3) if n != leader]
    elected = None
    while elected is None:
        for n in others:
            st = c.status(n, timeout=0.5)
            if st and st["state"] == "Leader" and st["term"] > term:
                elected = time.monotonic() - t0; new = n
        time.sleep(0.005)
    while True:
        try:
            if c.req(new, "/kv/b", "PUT", b"y", timeout=2)[0] == 200: break
        except Exception: pass
        time.sleep(0.005)
    writable = time.monotonic() - t0
    results.append((elected, writable))
    print(f"round {round}: killed {leader}, node {new} leads after {elected*1000:.0f} ms, accepts writes after {writable*1000:.0f} ms", flush=True)
    c.start(leader, level="off")
    while True:
        st = c.status(leader, timeout=0.5)
        if st and st["leader"] == new: break
        time.sleep(0.05)
c.stop_all()
e = sorted(r[0] for r in results); w = sorted(r[1] for r in results)
print(f"elected: {e[0]*1000:.0f}-{e[-1]*1000:.0f} ms, median {e[len(e)//2]*1000:.0f}; writable: {w[0]*1000:.0f}-{w[-1]*1000:.0f} ms")
