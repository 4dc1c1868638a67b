#!/usr/bin/env python3
"""A learner joining a kv_node leader that holds SIZE_MB of state: time to catch up from a
snapshot, and the peak resident memory (VmHWM) of both processes.

    cargo build --release -p bloomkv-raft --example kv_node
    python3 raft/scripts/snapshot_catchup.py SIZE_MB [VALUE_KIB] [CLIENTS]

The leader is loaded with random (incompressible) values of VALUE_KIB (default 256) over
HTTP by CLIENTS (default 4) writers, then takes a snapshot and purges its log up to it
(POST /cluster/snapshot), so the learner can only start from the snapshot. (Against a build
without that call, load more than 6000 values: openraft's policy then snapshots and purges.) Then a fresh node
is added as a learner, and /cluster/status is polled every 20 ms until it has applied
everything. KV_NODE names the binary, SNAP_DIR the scratch directory (removed first);
SNAP_POLICY=1 skips the call, to measure two builds the same way.
"""
import os, sys, threading, time, urllib.error

from kvcluster import Cluster

size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 10
value_kib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 4
c = Cluster(os.environ.get("SNAP_DIR", "/tmp/kv-snapshots"), 23000, [1, 2])
base, req, status = c.base, c.req, c.status


def du_mib(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total / 2**20


c.form([1])

count = size_mb * 1024 // value_kib
t0 = time.monotonic()
c.load(1, count, lambda: os.urandom(value_kib * 1024), clients=clients)
load_s = time.monotonic() - t0
print(f"loaded {count} values of {value_kib} KiB ({count * value_kib / 1024:.0f} MiB) in {load_s:.1f} s", flush=True)

t0 = time.monotonic()
try:
    if os.environ.get("SNAP_POLICY"):
        raise urllib.error.HTTPError("", 404, "left to openraft's policy", None, None)
    req(1, "/cluster/snapshot", "POST")
except urllib.error.HTTPError as e:
    # A build without the call (or SNAP_POLICY set): openraft's own policy (a snapshot every
    # 5000 entries, the log purged to 1000 entries before it) must have taken one; load over
    # 6000 values for that.
    if e.code != 404:
        raise
    while (status(1) or {}).get("purged") is None:
        time.sleep(0.05)
snap_s = time.monotonic() - t0
snap_dir = f"{base}/1/snapshots"
snaps = os.listdir(snap_dir) if os.path.isdir(snap_dir) else []
snap_mib = sum(os.path.getsize(f"{snap_dir}/{s}") for s in snaps) / 2**20
leader_hwm_before = c.proc_kib(1, "VmHWM:")
print(f"snapshot taken and log purged in {snap_s:.1f} s: {snaps} ({snap_mib:.0f} MiB); leader VmHWM {leader_hwm_before / 1024:.0f} MiB", flush=True)

# The learner logs at info: openraft's lines mark the first chunk and the last.
c.start(2, "info")
c.wait_up(2)
target = status(1)["last_applied"]
t0 = time.monotonic()
adder = threading.Thread(target=lambda: req(1, "/cluster/learner", "POST", [2, c.addr[2]]))
adder.start()
while True:
    st = status(2)
    if st and st["last_applied"] is not None and st["last_applied"] >= target:
        break
    time.sleep(0.02)
catchup_s = time.monotonic() - t0
adder.join()
learner_hwm = c.proc_kib(2, "VmHWM:")


def stamp(line):
    # "2026-11-26T18:31:06.365071Z ..." to seconds since midnight
    t = line.split()[0].rstrip("Z").split("T")[1].split(":")
    return int(t[0]) * 3600 + int(t[1]) * 60 + float(t[2])


log = open(f"{base}/node-2.log").read().splitlines()
first = next((stamp(l) for l in log if "begin_receiving_snapshot" in l), None)
last = next((stamp(l) for l in log if "finished streaming snapshot" in l), None)
if first is not None and last is not None:
    print(f"learner received the snapshot in {last - first:.2f} s (first chunk to last)", flush=True)
leader_hwm = c.proc_kib(1, "VmHWM:")
chunks = [l for l in req(2, "/metrics")[1].decode().splitlines() if l.startswith("raft_snapshot_chunks_received ")]
print(
    f"learner caught up (applied {target}) in {catchup_s:.2f} s; {chunks[0] if chunks else ''}; "
    f"learner VmHWM {learner_hwm / 1024:.0f} MiB; leader VmHWM {leader_hwm / 1024:.0f} MiB "
    f"(before the learner joined {leader_hwm_before / 1024:.0f} MiB); "
    f"learner directory {du_mib(f'{base}/2'):.0f} MiB",
    flush=True,
)
# Spot check: a few values read back from the learner match the leader's.
for i in (0, count // 2, count - 1):
    a = req(1, f"/kv/k{i:08}?consistency=stale")[1]
    b = req(2, f"/kv/k{i:08}?consistency=stale")[1]
    assert a == b, f"k{i:08} differs"
c.stop_all()
