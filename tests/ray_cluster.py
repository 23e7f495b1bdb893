"""A Ray cluster made as a user makes one: `ray start --head` and `ray start --address=<head>` as separate processes on
this machine, one CPU per node, each node with its own temp dir, token authentication on (Ray's default for a new
cluster), every process stopped at the end even when a test fails.

    with LocalCluster() as c:        # head + one more node
        c.address                    # "192.0.2.2:40123": what a driver passes as `address` / `--ray-address`
        c.env                        # the environment a driver needs (the cluster's token, no usage report)
        c.nodes[1].kill()            # node loss: SIGKILL its raylet and its workers, by pid (returns once they are gone)
        c.ensure_nodes(2)            # add nodes until two are up again (a killed head: a new cluster is needed)

Ray binds a node to the machine's own address (it replaces 127.0.0.1 by it), so both nodes share that address and
differ by node id; nothing leaves the machine.
"""
import os, re, secrets, shutil, signal, subprocess, sys, tempfile, time
from pathlib import Path

from acrb_nb.ray_head import reachable

RAY = Path(sys.executable).parent / "ray"


def ppid(pid: int) -> int:
    "The parent of process `pid`, from /proc (0 when it is gone)."
    try: return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError): return 0


def _children() -> dict:
    "pid -> child pids, from /proc."
    kids = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit(): kids.setdefault(ppid(int(d.name)), []).append(int(d.name))
    return kids


def descendants(pid: int) -> list:
    "Every process below `pid` (children, their children, ...)."
    kids, out, todo = _children(), [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


class Node:
    "One `ray start --block` process and everything it started (its session's GCS, raylet, agents and workers)."
    def __init__(self, name: str, cmd: list, env: dict, root: Path):
        self.name, self.log, self.temp_dir = name, root / f"{name}.log", root / name  # its --temp-dir
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)  # its own process group: stopped as one

    def wait_started(self, timeout: float = 90) -> str:
        "Block until `ray start` says the node runs; returns its log."
        t0 = time.time()
        while time.time() - t0 < timeout:
            text = self.log.read_text(errors="replace")
            if "Ray runtime started" in text: return text
            if self.proc.poll() is not None:
                raise RuntimeError(f"`ray start` for the {self.name} exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.2)
        raise TimeoutError(f"the {self.name} did not start in {timeout:.0f} s:\n{self.log.read_text(errors='replace')[-3000:]}")

    @property
    def alive(self) -> bool: return self.proc.poll() is None

    def raylet_pid(self) -> int | None:
        for p in descendants(self.proc.pid):
            try:
                if (Path("/proc") / str(p) / "comm").read_text().strip() == "raylet": return p
            except OSError: pass
        return None

    def kill(self, timeout: float = 30) -> list:
        "Node loss: SIGKILL the node's raylet and every process below `ray start` (its workers too), by pid, until they are gone."
        pids = descendants(self.proc.pid)
        for p in pids:
            try: os.kill(p, signal.SIGKILL)
            except ProcessLookupError: pass
        t0 = time.time()
        while any(ppid(p) for p in pids):  # a SIGKILLed process is gone once its parent has reaped it (or it is a zombie)
            if all(_zombie(p) for p in pids if ppid(p)) or time.time() - t0 > timeout: break
            time.sleep(0.05)
        return pids

    @property
    def up(self) -> bool:
        "Whether the node's raylet runs."
        return self.raylet_pid() is not None and not _zombie(self.raylet_pid())

    def stop(self):
        "Stop the node and everything it started (SIGTERM to its process group, SIGKILL after 10 s)."
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try: os.killpg(self.proc.pid, sig)
            except ProcessLookupError: return
            try:
                self.proc.wait(wait)
                for p in descendants(self.proc.pid): os.kill(p, signal.SIGKILL)
                return
            except (subprocess.TimeoutExpired, ProcessLookupError): pass


def _zombie(pid: int) -> bool:
    try: return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError): return True


class LocalCluster:
    "A head and `nodes - 1` more nodes started with `ray start`, one CPU each; a context manager."
    def __init__(self, nodes: int = 2, cpus: int = 1, env: dict | None = None):
        # a short root: Ray's socket paths must stay under the 107 characters of a unix socket address
        self.root = Path(tempfile.mkdtemp(prefix="acrbray-", dir="/tmp"))
        self.cpus, self.nodes = cpus, []
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                    "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}
        self.env.pop("RAY_ADDRESS", None)
        try:
            self._start_head()
            for _ in range(nodes - 1): self.add_node()
            self.wait_cpus(nodes * cpus)
        except BaseException:
            self.stop()
            raise

    def _start_head(self):
        head = Node("head", [str(RAY), "start", "--head", "--port=0", f"--num-cpus={self.cpus}",
                             f"--temp-dir={self.root / 'head'}", "--include-dashboard=false", "--disable-usage-stats",
                             "--block"], self.env, self.root)
        self.nodes.append(head)
        m = re.search(r"ray start --address='([^']+)'", head.wait_started())
        if not m: raise RuntimeError(f"no head address in `ray start --head`'s output:\n{head.log.read_text()[-3000:]}")
        self.address = m.group(1)

    def add_node(self) -> Node:
        "Start one more node joined to the head (`ray start --address=<head>`)."
        i = len(self.nodes)
        node = Node(f"node{i}", [str(RAY), "start", f"--address={self.address}", f"--num-cpus={self.cpus}",
                                 f"--temp-dir={self.root / f'node{i}'}", "--disable-usage-stats", "--block"],
                    self.env, self.root)
        self.nodes.append(node)
        node.wait_started()
        return node

    @property
    def head_up(self) -> bool:
        "Whether the head's GCS answers (a killed head does not come back: its cluster is over)."
        return hasattr(self, "address") and reachable(self.address)

    def ensure_nodes(self, n: int, wait: bool = True) -> list:
        "Start nodes until `n` run (head included) and, with `wait`, a driver sees their CPUs; returns the nodes that run."
        while sum(x.up for x in self.nodes) < n: self.add_node()
        if wait: self.wait_cpus(n * self.cpus)
        return [x for x in self.nodes if x.up]

    def wait_cpus(self, n: int, timeout: float = 60):
        "Block until a driver sees `n` CPUs in the cluster (a joined node is placed on a little after it starts)."
        code = ("import ray, sys, time; ray.init(address=sys.argv[1], log_to_driver=False); t = time.time()\n"
                "while ray.cluster_resources().get('CPU', 0) != float(sys.argv[2]):\n"
                "    if time.time() - t > float(sys.argv[3]): sys.exit(f'CPUs: {ray.cluster_resources()}')\n"
                "    time.sleep(0.2)")
        p = subprocess.run([sys.executable, "-c", code, self.address, str(n), str(timeout)], env=self.env,
                           capture_output=True, text=True, timeout=timeout + 60)
        if p.returncode: raise RuntimeError(f"the cluster at {self.address} did not show {n} CPUs: {p.stderr[-2000:]}")

    def stop(self):
        "Stop every node (a cluster whose head is gone: SIGKILL, `ray start` included — it would wait 10 s for the head)."
        if self.nodes and not self.head_up:
            for n in self.nodes:
                n.kill()
                n.proc.kill()
        for n in reversed(self.nodes): n.stop()
        for _ in range(20):  # a Ray process still exiting may write a last log line while the folder goes
            shutil.rmtree(self.root, ignore_errors=True)
            if not self.root.exists(): break
            time.sleep(0.25)

    def __enter__(self): return self
    def __exit__(self, *exc): self.stop()
