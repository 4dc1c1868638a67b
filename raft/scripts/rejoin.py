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
scratch directory (removed first). Run from the repository's root.
"""
import os, shutil, sys, time

from kvcluster import Cluster

size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 64
value_kib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
c = Cluster(os.environ.get("REJOIN_DIR", "/tmp/kv-rejoin"), 23100, [1, 2, 3, 4])
c.form([1, 2, 3])

count = size_mb * 1024 // value_kib
c.load(1, count, lambda: os.urandom(value_kib * 1024 - 16))
c.req(1, "/cluster/snapshot", "POST")
print(f"loaded {count} values of {value_kib} KiB ({size_mb} MiB), snapshot taken, log purged", flush=True)

c.start(4)
c.wait_up(4)
t0 = time.monotonic()
c.req(1, "/cluster/learner", "POST", [4, c.addr[4]])
fresh_s = time.monotonic() - t0
c.req(1, "/cluster/remove", "POST", [4])
c.kill(4)
print(f"fresh learner caught up in {fresh_s:.1f} s", flush=True)

c.kill(3)
shutil.rmtree(f"{c.base}/3")
target = c.status(1)["last_applied"]
t0 = time.monotonic()
c.start(3)
c.wait_applied(3, target)
wiped_s = time.monotonic() - t0
s = c.status(1)["replication"]["3"]
print(f"wiped voter back in sync in {wiped_s:.1f} s ({wiped_s / fresh_s:.2f}x the fresh learner); "
      f"leader sees it matched {s['matched']}, lag {s['lag_entries']} entries", flush=True)
c.stop_all()
