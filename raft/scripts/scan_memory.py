#!/usr/bin/env python3
"""A follower's resident memory while a client reads a large prefix from it page by page.

    cargo build --release -p bloomkv-raft --example kv_node
    python3 raft/scripts/scan_memory.py COUNT [VALUE_KIB]

Two kv_nodes (a leader and a voter), COUNT random values of VALUE_KIB (default 256) written
through the leader under one prefix; once the follower has applied them all, its VmRSS is
sampled for 2 s (idle), then every 10 ms during a stale scan of the whole prefix from it, following the
cursors (`limit=100000`, so only the node's page caps bound a page). Prints the idle and peak
RSS, and of it the anonymous memory (the rest is table pages the node maps), the pages and
bytes read. KV_NODE names the binary, SCAN_DIR the scratch directory.
"""
import json, os, shutil, subprocess, sys, threading, time, urllib.request

K = os.environ.get("KV_NODE", "target/release/examples/kv_node")
base = os.environ.get("SCAN_DIR", "/tmp/kv-scan")
count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
value_kib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
shutil.rmtree(base, ignore_errors=True)
os.makedirs(base)
addr = {1: "127.0.0.1:23201", 2: "127.0.0.1:23202"}
procs = {}
for n in addr:
    procs[n] = subprocess.Popen(
        [K, str(n), addr[n], f"{base}/{n}", "--log-level", "warn", "--admin-timeout", "3600"],
        stderr=open(f"{base}/node-{n}.log", "wb"),
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


def rss_kib(n, field="VmRSS:"):
    with open(f"/proc/{procs[n].pid}/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])


for n in addr:
    while status(n) is None:
        time.sleep(0.05)
req(1, "/cluster/init", "POST")
while (status(1) or {}).get("leader") != 1:
    time.sleep(0.05)
req(1, "/cluster/learner", "POST", [2, addr[2]])
req(1, "/cluster/members", "POST", [1, 2])

keys = iter(range(count))
lock = threading.Lock()


def writer():
    while True:
        with lock:
            i = next(keys, None)
        if i is None:
            return
        # Hex text: a page's JSON holds values as they are, not hex-encoded twice over.
        req(1, f"/kv/big{i:08}", "PUT", os.urandom(value_kib * 512).hex().encode())


threads = [threading.Thread(target=writer) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
target = status(1)["last_applied"]
while ((status(2) or {}).get("last_applied") or -1) < target:
    time.sleep(0.05)
print(f"loaded {count} values of {value_kib} KiB ({count * value_kib / 1024:.0f} MiB)", flush=True)

idle, idle_anon = [], []
for _ in range(100):
    idle.append(rss_kib(2))
    idle_anon.append(rss_kib(2, "RssAnon:"))
    time.sleep(0.02)
peak = [0]
peak_anon = [0]
scanning = [True]


def sampler():
    while scanning[0]:
        peak[0] = max(peak[0], rss_kib(2))
        # Anonymous memory is the node's own; the rest of RSS is table pages it maps.
        peak_anon[0] = max(peak_anon[0], rss_kib(2, "RssAnon:"))
        time.sleep(0.01)


s = threading.Thread(target=sampler)
s.start()
t0 = time.monotonic()
cursor, pages, items, read = None, 0, 0, 0
while True:
    q = "/kv?prefix=big&limit=100000&consistency=stale" + (f"&cursor={cursor}" if cursor else "")
    body = req(2, q)[1]
    page = json.loads(body)
    pages, items, read = pages + 1, items + len(page["items"]), read + len(body)
    if not page["more"]:
        break
    cursor = page["cursor"]
scan_s = time.monotonic() - t0
scanning[0] = False
s.join()
print(f"scan: {items} keys in {pages} pages, {read / 2**20:.0f} MiB of JSON, {scan_s:.1f} s", flush=True)
print(f"follower VmRSS idle {max(idle) / 1024:.0f} MiB, peak during the scan {peak[0] / 1024:.0f} MiB "
      f"(+{(peak[0] - max(idle)) / 1024:.0f} MiB); anonymous: idle {max(idle_anon) / 1024:.0f} MiB, "
      f"peak {peak_anon[0] / 1024:.0f} MiB (+{(peak_anon[0] - max(idle_anon)) / 1024:.0f} MiB)", flush=True)
for p in procs.values():
    p.kill()
