#!/usr/bin/env python3
"""Time to a new leader after `kill -9` of the leader of three kv_node processes on loopback.

    cargo build --release -p bloomkv-raft --example kv_node
    python3 raft/scripts/failover.py [ROUNDS]

Each round waits a second of steady heartbeats, kills the leader, polls the others'
/cluster/status every 5 ms until one leads in a newer term, then until a PUT succeeds on it,
and restarts the killed node from its directory before the next round.
"""
import json, os, shutil, signal, subprocess, sys, time, urllib.request
K = os.environ.get("KV_NODE", "target/release/examples/kv_node")
base = os.environ.get("FAILOVER_DIR", "/tmp/kv-failover")
shutil.rmtree(base, ignore_errors=True)
addr = {n: f"127.0.0.1:2200{n}" for n in (1, 2, 3)}
procs = {}
def start(n):
    procs[n] = subprocess.Popen([K, str(n), addr[n], f"{base}/{n}", "--log-level", "off"], stderr=subprocess.DEVNULL)
def req(n, path, method="GET", body=None, timeout=2):
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    r = urllib.request.Request(f"http://{addr[n]}{path}", data=data, method=method)
    if body is not None and not isinstance(body, bytes):
        r.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(r, timeout=timeout) as f:
        return f.status, f.read()
def status(n):
    try:
        return json.loads(req(n, "/cluster/status", timeout=0.5)[1])
    except Exception:
        return None
for n in (1, 2, 3):
    start(n)
time.sleep(0.5)
req(1, "/cluster/init", "POST")
time.sleep(1)
for n in (2, 3):
    req(1, "/cluster/learner", "POST", [n, addr[n]])
req(1, "/cluster/members", "POST", [1, 2, 3])
req(1, "/kv/a", "PUT", b"x")
results = []
for round in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    s = status(1) or status(2) or status(3)
    leader = s["leader"]
    term = s["term"]
    time.sleep(1.0)  # steady state: heartbeats flowing
    procs[leader].send_signal(signal.SIGKILL); procs[leader].wait()
    t0 = time.monotonic()
    others = [n for n in (1, 2, 3) if n != leader]
    elected = None
    while elected is None:
        for n in others:
            st = status(n)
            if st and st["state"] == "Leader" and st["term"] > term:
                elected = time.monotonic() - t0; new = n
        time.sleep(0.005)
    while True:
        try:
            if req(new, "/kv/b", "PUT", b"y")[0] == 200: break
        except Exception: pass
        time.sleep(0.005)
    writable = time.monotonic() - t0
    results.append((elected, writable))
    print(f"round {round}: killed {leader}, node {new} leads after {elected*1000:.0f} ms, accepts writes after {writable*1000:.0f} ms", flush=True)
    start(leader)
    while True:
        st = status(leader)
        if st and st["leader"] == new: break
        time.sleep(0.05)
for p in procs.values(): p.kill()
e = sorted(r[0] for r in results); w = sorted(r[1] for r in results)
print(f"elected: {e[0]*1000:.0f}-{e[-1]*1000:.0f} ms, median {e[len(e)//2]*1000:.0f}; writable: {w[0]*1000:.0f}-{w[-1]*1000:.0f} ms")
