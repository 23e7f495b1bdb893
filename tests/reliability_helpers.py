"""Helpers shared by the reliability suite (tests/test_reliability_*.py): dummy keys, a content hook for the fake
servers, child-process pipeline runs that are SIGKILLed at seeded points, and comparisons of run outputs.

`hooks` is also imported by fake server *processes* (`start_server_process(..., hooks="reliability_helpers:hooks",
env=server_env(...))`), so this module must stay importable without pytest.
"""
import hashlib, json, os, signal, sqlite3, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# Recognisable dummy keys, shaped like the providers' keys (so the shape scanners see them too); never real.
DUMMY_OPENAI_KEY = "sk-acrbdummy-" + "R3l1abKeyZ" * 3
DUMMY_GOOGLE_KEY = "AIza" + "ACRBdummyReliabilityKey0123456789ab"  # AIza + 35 characters
assert len(DUMMY_GOOGLE_KEY) == 39
DUMMY_ENV = {"OPENAI_API_KEY": DUMMY_OPENAI_KEY, "GEMINI_API_KEY": DUMMY_GOOGLE_KEY, "GOOGLE_API_KEY": DUMMY_GOOGLE_KEY}


# A loopback "provider" that refuses every key (OpenAI's 401 shape) and counts the requests that reached it.
class Loopback:
    "An HTTP server on 127.0.0.1 that answers every request 401 (OpenAI's error shape) and counts the requests."
    def __init__(self):
        self.count, lock, outer = 0, threading.Lock(), self
        class H(BaseHTTPRequestHandler):
            def _any(self):
                with lock: outer.count += 1
                self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.dumps({"error": {"message": "Incorrect API key provided: sk-bad.", "type": "invalid_request_error",
                                             "code": "invalid_api_key"}}).encode()
                self.send_response(401); self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
            do_GET = do_POST = _any
            def log_message(self, *a): pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
    def close(self): self.server.shutdown(); self.server.server_close()


# --------------------------------------------------------------------------------------------------------------------
# Fake-server content hook: photo-like scenes (the default flat test card is a "placeholder" to the pixel detector),
# and an optional side log of (prompt, input-image hash) per rendered image, to tell I2I items apart at the server
# (an edit instruction is the same for every source image, so the prompt alone does not name the item).
def pixel_sha(im) -> str:
    "SHA-256 of an image's RGB pixels (the same on both sides of a PNG round trip)."
    return hashlib.sha256(np.asarray(im.convert("RGB")).tobytes()).hexdigest()


def scene_image(prompt, size, inputs):
    "A deterministic photo-like scene (gradient, ground, shapes, slight blur) from the prompt; edits start from the input."
    from PIL import Image, ImageDraw, ImageFilter
    g = np.random.default_rng(int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big"))
    w, h = size
    side = os.environ.get("RELIABILITY_IMAGE_LOG")
    if side:
        with open(side, "a") as f:
            f.write(json.dumps({"prompt": prompt, "input": pixel_sha(inputs[0]) if inputs else None}) + "\n")
    if inputs: im = inputs[0].convert("RGB").resize((w, h))
    else:
        top, bot = g.integers(40, 220, 3), g.integers(20, 200, 3)
        t = np.linspace(0, 1, h)[:, None, None]
        im = Image.fromarray((top * (1 - t) + bot * t).repeat(w, 1).astype(np.uint8))
    d = ImageDraw.Draw(im)
    d.rectangle([0, int(h * g.uniform(.6, .8)), w, h], fill=tuple(int(v) for v in g.integers(10, 160, 3)))
    for _ in range(int(g.integers(3, 7))):
        x, y, r = int(g.integers(0, w)), int(g.integers(0, h)), int(g.integers(max(2, w // 16), max(3, w // 4)))
        (d.ellipse if g.random() < .5 else d.rectangle)([x - r, y - r, x + r, y + r],
                                                         fill=tuple(int(v) for v in g.integers(0, 256, 3)))
    return im.filter(ImageFilter.GaussianBlur(0.6))


_TOXIC_WORDS = ("hate", "stupid", "scum", "kill", "idiot", "disgusting", "lazy", "dirty", "terrorist", "inferior")


def label_logprobs(req, text, top):
    "First-token log-probs for zero-shot labels: 'toxic' vs 'non' (prefix of 'non-toxic'), from a lexicon plus hash noise."
    import math
    import re
    p = (req.get("prompt") or "").lower()
    u = hashlib.sha256(p.encode()).digest()[0] / 255
    opts = re.findall(r"^([ab]): *(\S+)", p, re.M)  # an IAT text trial: answer with the first word of option A or B
    if len(opts) == 2:
        la = math.log(0.3 + 0.4 * u)
        alts = sorted([{"token": opts[0][1], "logprob": la}, {"token": opts[1][1], "logprob": math.log(0.95 - math.exp(la))}],
                      key=lambda a: -a["logprob"])
        return [{"token": alts[0]["token"], "logprob": alts[0]["logprob"], "top_logprobs": alts[:max(1, top)]}]
    x = 4 * (u - 0.5) + (2.0 if any(w in p for w in _TOXIC_WORDS) else -1.0)
    pt = 1 / (1 + math.exp(-x))
    alts = sorted([{"token": "toxic", "logprob": math.log(0.9 * pt)}, {"token": "non", "logprob": math.log(0.9 * (1 - pt))},
                   {"token": "The", "logprob": math.log(0.05)}], key=lambda a: -a["logprob"])
    return [{"token": alts[0]["token"], "logprob": alts[0]["logprob"], "top_logprobs": alts[:max(1, top)]}]


def hooks():
    "Server kwargs for `--hooks reliability_helpers:hooks`."
    return {"image_fn": scene_image, "logprob_fn": label_logprobs}


def server_env(**extra) -> dict:
    "Environment for a fake server process that imports this module's hooks."
    return {"PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]), **extra}


def read_jsonl(path) -> list:
    p = Path(path)
    if not p.exists(): return []
    out = []
    for line in p.read_text().splitlines():
        try: out.append(json.loads(line))
        except ValueError: pass  # a line cut by a kill
    return out


# --------------------------------------------------------------------------------------------------------------------
# Pipelines in child processes.
#
# Importing the pipelines costs seconds per process (pandas, scipy, the SDKs), and a kill-and-resume test starts four
# processes per pipeline. A *fork server* imports them once; each run is a fresh `os.fork()` of it that runs the
# pipeline function and exits — a separate process with its own memory, killed with SIGKILL exactly like a
# user's `python run.py`. Nothing of a killed child survives except what it wrote to disk and sent to the servers.
FORK_SERVER = r"""
import importlib, json, os, signal, sys, traceback
for m in sys.argv[1:]:
    try: importlib.import_module(m)
    except Exception as e: print(f"fork server: cannot pre-import {m}: {e!r}", file=sys.stderr)  # the child will say more
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel: a finished child is gone at once
print("READY", flush=True)
for line in sys.stdin:
    spec = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the pipeline may run subprocesses (git) and wait for them
            fd = os.open(spec["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC); os.dup2(fd, 2); os.dup2(fd, 1)
            os.chdir(spec["cwd"]); os.environ.update(spec["env"])
            mod, fn = spec["fn"].split(":")
            getattr(importlib.import_module(mod), fn)(**spec["kwargs"])
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            with open(spec["stderr"] + ".rc", "w") as f: f.write(str(code))
            os._exit(code)
    print(pid, flush=True)
"""


class Child:
    "A pipeline run forked by a `ForkServer`."
    def __init__(self, pid, err):
        self.pid, self.err = pid, Path(err)

    def alive(self) -> bool:
        try: os.kill(self.pid, 0); return True
        except ProcessLookupError: return False

    def kill(self):
        try: os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError: pass
        t0 = time.time()
        while self.alive() and time.time() - t0 < 30: time.sleep(0.01)

    def stderr(self) -> str:
        return self.err.read_text(errors="replace") if self.err.exists() else ""

    def wait(self, timeout: float = 300) -> int:
        "Exit code once the child has ended (None if killed before it could write one)."
        t0 = time.time()
        while self.alive():
            if time.time() - t0 > timeout: self.kill(); raise TimeoutError(f"child {self.pid} ran over {timeout}s")
            time.sleep(0.02)
        rc = Path(f"{self.err}.rc")
        return int(rc.read_text()) if rc.exists() else None


class ForkServer:
    "A process that imports `modules` once and forks a fresh child per pipeline run."
    def __init__(self, modules, workdir):
        self.workdir, self.n = Path(workdir), 0
        self.proc = subprocess.Popen([sys.executable, "-c", FORK_SERVER, *modules], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=child_env())
        line = self.proc.stdout.readline().strip()
        assert line == "READY", f"fork server did not start (got {line!r})"

    def start(self, fn: str, kwargs: dict, env: dict | None = None, cwd=None) -> Child:
        "Fork a child running `fn(**kwargs)` ('module:function') with `env` added to the environment."
        self.n += 1
        err = self.workdir / f"child-{self.n}.log"
        self.proc.stdin.write(json.dumps({"fn": fn, "kwargs": kwargs, "env": env or {}, "cwd": str(cwd or self.workdir),
                                          "stderr": str(err)}) + "\n")
        self.proc.stdin.flush()
        return Child(int(self.proc.stdout.readline()), err)

    def run(self, fn: str, kwargs: dict, env: dict | None = None, cwd=None, timeout: float = 300):
        "Run `fn(**kwargs)` to completion in a forked child; fails the test with the child's traceback if it fails."
        c = self.start(fn, kwargs, env, cwd)
        rc = c.wait(timeout)
        assert rc == 0, f"{fn} failed (exit {rc}):\n{c.stderr()[-4000:]}"

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try: self.proc.wait(10)
            except subprocess.TimeoutExpired: self.proc.kill(); self.proc.wait(10)
        self.proc.stdout.close()

    def __enter__(self): return self
    def __exit__(self, *exc): self.close()


def child_env(**extra) -> dict:
    "The environment of a pipeline child: no progress bars, offline hubs, dummy keys, plus `extra`."
    env = {**os.environ, "ACRB_PROGRESS": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg",
           **DUMMY_ENV, **extra}
    return {k: v for k, v in env.items() if v is not None}


def done_count(dbs) -> int:
    "Items with status 'done' over the given item stores (read without creating anything)."
    n = 0
    for db in dbs:
        if not Path(db).exists(): continue
        try:
            con = sqlite3.connect(str(db), timeout=5)
            try: n += con.execute("SELECT COUNT(*) FROM items WHERE status='done'").fetchone()[0]
            finally: con.close()
        except sqlite3.OperationalError: pass  # schema not created yet
    return n


def kill_points(seed_names, total: int, n: int = 3, lo: float = 0.1, hi: float = 0.85) -> list:
    "`n` seeded, increasing kill points (items done) inside [lo, hi] of `total`."
    from acrb_nb.core import rng
    g = rng(2026, "reliability", "kill-points", *seed_names)
    a, b = max(1, int(total * lo)), max(2, int(total * hi))
    return sorted(int(x) for x in g.choice(np.arange(a, b), size=n, replace=False))


def kill_at(fs: ForkServer, fn, kwargs, env, dbs, points, *, on_kill=None, timeout: float = 120) -> list:
    """Start the pipeline once per point and SIGKILL it as soon as the stores hold that many done items.

    `on_kill(i)` runs right after each kill (e.g. to snapshot the server log). Returns the done counts seen at each kill."""
    seen, prev = [], done_count(dbs)
    for i, k in enumerate(points):
        k = max(k, prev + 1)
        c = fs.start(fn, kwargs, env)
        t0 = time.time()
        try:
            while time.time() - t0 < timeout:
                if done_count(dbs) >= k or not c.alive(): break
                time.sleep(0.003)
            alive = c.alive()
        finally:
            c.kill()
        assert alive, f"{fn} ended before the kill point {k} (done {done_count(dbs)}):\n{c.stderr()[-3000:]}"
        time.sleep(0.25)  # requests already on the wire reach the server and its log
        prev = done_count(dbs)
        seen.append(prev)
        if on_kill is not None: on_kill(i)
    return seen


# --------------------------------------------------------------------------------------------------------------------
# Comparing outputs
VOLATILE = {"timestamp", "seconds", "wall_seconds", "created", "updated", "response_id", "request_id"}


def strip_volatile(o, drop=VOLATILE):
    "Drop run-time fields (timestamps, latencies) at any depth."
    if isinstance(o, dict): return {k: strip_volatile(v, drop) for k, v in o.items() if k not in drop}
    if isinstance(o, list): return [strip_volatile(v, drop) for v in o]
    return o


def metrics_json(path) -> str:
    "A metrics JSON file without timestamps, as sorted-key text (byte-comparable)."
    return json.dumps(strip_volatile(json.loads(Path(path).read_text())), sort_keys=True, indent=1)


def store_snapshot(db) -> dict:
    "key -> (status, outcome, record without run-time fields) for every item of a store."
    con = sqlite3.connect(str(db), timeout=30)
    try: rows = con.execute("SELECT key, status, outcome, record FROM items").fetchall()
    finally: con.close()
    return {k: (s, o, strip_volatile(json.loads(r)) if r else None) for k, s, o, r in rows}


# --------------------------------------------------------------------------------------------------------------------
# Determinism: the artefacts of a set of runs, computed in a fresh interpreter (see test_reliability_determinism.py)
DETERMINISM_CONFIGS = {
    "acrb-t2i-sim": dict(model="sim", n_base_prompts=5),
    "acrb-i2i-sim": dict(model="sim", mode="i2i", n_base_prompts=2),
    "acrb-t2i-tiny-sd": dict(model="tiny-sd", attributes=["gender", "age"], n_base_prompts=2),
    "acrb-i2i-tiny-ip2p": dict(model="tiny-ip2p", mode="i2i", attributes=["gender"], n_base_prompts=2),
}


def _keys(db) -> str:
    con = sqlite3.connect(str(db))
    try: return json.dumps(sorted(k for (k,) in con.execute("SELECT key FROM items")))
    finally: con.close()


def determinism_artifacts(root, out, seed=3):
    "Run every determinism configuration under `root` and write {config: {artefact: text}} to `out` (JSON)."
    root, res = Path(root), {}
    from acrb_nb.acrb.pipeline import run_acrb
    for name, kw in DETERMINISM_CONFIGS.items():
        r = run_acrb(**kw, seed=seed, analysis={"n_boot": 200}, run_dir=str(root / name))
        res[name] = {"run_id": r.run.spec.run_id, "stage1_prompts": (r.run.dir / "stage1_prompts.json").read_text(),
                     "item_keys": _keys(r.run.dir / "items.sqlite"), "metrics": metrics_json(r.run.dir / "acrb_summary.json")}
    from acrb_nb.iat import iat_study
    s = iat_study("sim", dimensions=["gender", "race"], words=4, pairs_per_combo=2, seed=seed, analysis={"n_boot": 200, "n_perm": 200},
                  run_dir=str(root / "iat-sim"), execution={"progress": False})
    res["iat-seed-sim"] = {"run_id": s.run_dir.name, "item_keys": _keys(s.run_dir / "items.sqlite") + _keys(s.run_dir / "images" / "items.sqlite"),
                           "results": s.results_path.read_text().replace(str(root), "ROOT"),
                           "metrics": json.dumps(json.loads(s.effects.to_json(orient="records")), sort_keys=True)}
    from acrb_nb.toxicity.zeroshot import score_dataset
    rows = json.loads((ROOT / "data" / "toxicity" / "toxigen_200.json").read_text())[:24]
    import pandas as pd
    df = score_dataset(pd.DataFrame(rows)[["text", "is_toxic", "target_group"]], "tiny-gpt2", run=str(root / "tox"),
                       label_col="is_toxic", execution={"progress": False}).rows
    res["toxicity-tiny-gpt2"] = {"item_keys": _keys(root / "tox" / "items.sqlite"),
                                 "metrics": json.dumps(json.loads(df.to_json(orient="records")), sort_keys=True)}
    Path(out).write_text(json.dumps(res, sort_keys=True, indent=1))
