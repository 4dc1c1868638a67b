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
import json, os, sys, threading, time

from kvcluster import Cluster

count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
value_kib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
c = Cluster(os.environ.get("SCAN_DIR", "/tmp/kv-scan"), 23200, [1, 2])
c.form([1, 2])
# Hex text: a page's JSON holds values as they are, not hex-encoded twice over.
c.load(1, count, lambda: os.urandom(value_kib * 512).hex().encode(), key=lambda i: f"big{i:08}")
c.wait_applied(2, c.status(1)["last_applied"])
print(f"loaded {count} values of {value_kib} KiB ({count * value_kib / 1024:.0f} MiB)", flush=True)

idle, idle_anon = [], []
for _ in range(100):
    idle.append(c.proc_kib(2, "VmRSS:"))
    idle_anon.append(c.proc_kib(2, "RssAnon:"))
    time.sleep(0.02)
peak = [0]
peak_anon = [0]
scanning = [True]


def sampler():
    while scanning[0]:
        peak[0] = max(peak[0], c.proc_kib(2, "VmRSS:"))
        # Anonymous memory is the node's own; the rest of RSS is table pages it maps.
        peak_anon[0] = max(peak_anon[0], c.proc_kib(2, "RssAnon:"))
        time.sleep(0.01)


s = threading.Thread(target=sampler)
s.start()
t0 = time.monotonic()
cursor, pages, items, read = None, 0, 0, 0
while True:
    q = "/kv?prefix=big&limit=100000&consistency=stale" + (f"&cursor={cursor}" if cursor else "")
    body = c.req(2, q)[1]
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
c.stop_all()
