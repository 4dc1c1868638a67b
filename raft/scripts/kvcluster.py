"""kv_node processes on loopback for the measurement scripts beside this file: start them, call
their HTTP API, read their status and memory.

    from kvcluster import Cluster
    c = Cluster("/tmp/kv-x", 23100, [1, 2, 3])   # node n listens on 127.0.0.1:23100+n
    c.start(1); c.wait_up(1); c.req(1, "/cluster/init", "POST")

KV_NODE names the binary (default target/release/examples/kv_node). The scratch directory is
removed and made again; node n keeps its store in DIR/n and its stderr in DIR/node-n.log.
"""
import json, os, shutil, subprocess, threading, time, urllib.request

KV_NODE = os.environ.get("KV_NODE", "target/release/examples/kv_node")


class Cluster:
    def __init__(self, base, port_base, ids):
        self.base = base
        self.addr = {n: f"127.0.0.1:{port_base + n}" for n in ids}
        self.procs = {}
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)

    def start(self, n, level="warn", flags=()):
        log = open(f"{self.base}/node-{n}.log", "ab")
        cmd = [KV_NODE, str(n), self.addr[n], f"{self.base}/{n}", "--log-level", level]
        self.procs[n] = subprocess.Popen(cmd + ["--admin-timeout", "3600", *flags], stderr=log)

    def kill(self, n):
        self.procs[n].kill()
        self.procs[n].wait()

    def stop_all(self):
        for p in self.procs.values():
            p.kill()
            p.wait()

    def req(self, n, path, method="GET", body=None, timeout=3600):
        """(status, body) of one call; a body that is not bytes is sent as JSON."""
        json_body = body is not None and not isinstance(body, bytes)
        data = json.dumps(body).encode() if json_body else body
        r = urllib.request.Request(f"http://{self.addr[n]}{path}", data=data, method=method)
        if json_body:
            r.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(r, timeout=timeout) as f:
            return f.status, f.read()

    def status(self, n, timeout=2):
        try:
            return json.loads(self.req(n, "/cluster/status", timeout=timeout)[1])
        except Exception:
            return None

    def wait_up(self, n):
        while self.status(n) is None:
            time.sleep(0.05)

    def wait_applied(self, n, target):
        while ((self.status(n) or {}).get("last_applied") or -1) < target:
            time.sleep(0.02)

    def form(self, ids, level="warn"):
        """Starts `ids`, makes the first lead and the others voters."""
        for n in ids:
            self.start(n, level)
        for n in ids:
            self.wait_up(n)
        first = ids[0]
        self.req(first, "/cluster/init", "POST")
        while (self.status(first) or {}).get("leader") != first:
            time.sleep(0.05)
        for n in ids[1:]:
            self.req(first, "/cluster/learner", "POST", [n, self.addr[n]])
        self.req(first, "/cluster/members", "POST", list(ids))

    def proc_kib(self, n, field):
        """A `/proc/<pid>/status` figure of node n in KiB: VmRSS:, VmHWM:, RssAnon:."""
        with open(f"/proc/{self.procs[n].pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])

    def load(self, n, count, value, key=lambda i: f"k{i:08}", clients=4):
        """PUTs `count` keys through node n from `clients` threads, `value()` making each value."""
        keys = iter(range(count))
        lock = threading.Lock()

        def writer():
            while True:
                with lock:
                    i = next(keys, None)
                if i is None:
                    return
                self.req(n, f"/kv/{key(i)}", "PUT", value())

        threads = [threading.Thread(target=writer) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
