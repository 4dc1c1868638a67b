#!/usr/bin/env python3
"""A voter that lost its disk against a fresh learner: the time each takes to be back in sync
with a three-node kv_node cluster holding SIZE_MB of state.

    cargo build --release -p bloomkv-raft --example kv_node
    python3 raft/scripts/rejoin.py SIZE_MB [VALUE_KIB]

Loads the cluster with random values of VALUE_KIB (default 256) through the leader, takes a
snapshot and purges the log up to it (POST /cluster/snapshot). Then (1) a fresh node 4 is added
as a learner (the call returns once it has caught up) and removed again, and (2) voter 3 is
killed, its directory deleted, and it is started again with the same id and address: timed
until it has applied everything the leader has. KV_NODE names the binary, REJOIN_DIR the
scratch directory (removed first).
"""
import json, os, shutil, subprocess, sys, threading, time, urllib.request

K = os.environ.get("KV_NODE", "target/release/examples/kv_node")
base = os.environ.get("REJOIN_DIR", "/tmp/kv-rejoin")
size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 64
value_kib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
shutil.rmtree(base, ignore_errors=True)
os.makedirs(base)
addr = {n: f"127.0.0.1:{23100 + n}" for n in range(1, 5)}
procs = {}


def start(n):
    log = open(f"{base}/node-{n}.log", "ab")
    procs[n] = subprocess.Popen(
        [K, str(n), addr[n], f"{base}/{n}", "--log-level", "warn", "--admin-timeout", "3600"],
        stderr=log,
    )


def req(n, path, method="GET", body=None, timeout=3600):
    data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
    r = urllib.request.Request(f"http://{addr[n]}{path}", data=data, method=method)
    if body is not None and not isinstance(body, bytes):
        r.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(r, timeout=timeout) as f:
        return f.status, f.read()


def status(n):
    try:
        return json.loads(req(n, "/cluster/status", timeout=2)[1])
    except Exception:
        return None


def wait(what, check):
    while not check():
        time.sleep(0.02)


for n in (1, 2, 3):
    start(n)
for n in (1, 2, 3):
    wait("up", lambda: status(n) is not None)
req(1, "/cluster/init", "POST")
wait("leader", lambda: (status(1) or {}).get("leader") == 1)
for n in (2, 3):
    req(1, "/cluster/learner", "POST", [n, addr[n]])
req(1, "/cluster/members", "POST", [1, 2, 3])

count = size_mb * 1024 // value_kib
keys = iter(range(count))
lock = threading.Lock()


def writer():
    while True:
        with lock:
            i = next(keys, None)
        if i is None:
            return
        req(1, f"/kv/k{i:08}", "PUT", os.urandom(value_kib * 1024 - 16))


threads = [threading.Thread(target=writer) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
req(1, "/cluster/snapshot", "POST")
print(f"loaded {count} values of {value_kib} KiB ({size_mb} MiB), snapshot taken, log purged", flush=True)

start(4)
wait("node 4 up", lambda: status(4) is not None)
t0 = time.monotonic()
req(1, "/cluster/learner", "POST", [4, addr[4]])
fresh_s = time.monotonic() - t0
req(1, "/cluster/remove", "POST", [4])
procs[4].kill()
print(f"fresh learner caught up in {fresh_s:.1f} s", flush=True)

procs[3].kill()
procs[3].wait()
shutil.rmtree(f"{base}/3")
target = status(1)["last_applied"]
t0 = time.monotonic()
start(3)
wait("node 3 in sync", lambda: ((status(3) or {}).get("last_applied") or -1) >= target)
wiped_s = time.monotonic() - t0
s = status(1)["replication"]["3"]
print(f"wiped voter back in sync in {wiped_s:.1f} s ({wiped_s / fresh_s:.2f}x the fresh learner); "
      f"leader sees it matched {s['matched']}, lag {s['lag_entries']} entries", flush=True)
for p in procs.values():
    p.kill()
