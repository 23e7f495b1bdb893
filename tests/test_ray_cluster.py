"""A real Ray cluster, the way a user with several machines runs one: a head started with `ray start --head` and a
second node with `ray start --address=<head>`, separate processes with one CPU each (tests/ray_cluster.py). The work
goes to it through the public parameter — `execution={"executor": "ray", "address": <head>}` in a driver process
(tests/cluster_driver.py) and `--ray-address` on the CLI — and:

- an ACRB audit (the `sim` generator and judge) and toxicity scoring (tiny GPT-2) land on both nodes (each item's node
  is stored with it and counted per stage in the manifest) with results identical to `execution="local"`; an ACRB
  audit of an API generator (gpt-image-1 on a loopback OpenAI server) keeps its requests on the driver's threads (one
  per image) and sends its judge to the workers, with the local run's records;
- **node loss**: the second node's raylet and workers are SIGKILLed while items are in flight, once under an ACRB
  audit and once under a pool whose workers call a loopback OpenAI server: each run finishes on the head node, no
  finished item is lost or recomputed (the server's log: no finished prompt requested twice) and the metrics equal
  the local run's;
  The manifest says which nodes were lost, how many workers died, which items were sent again and which node finished
  each, and the report's provenance rows (`execution_provenance`) show it;
- **head loss**, with the default `head_timeout` (30 s), at three points of an ACRB audit — mid-stage, between two
  stages, during a pool's start (its workers requested, none ready yet) — one driver at each point, attached to the
  other node (a driver on another machine than the head's), all three stopped there by a fault hook until the head is
  killed: each ends with `RayHeadLost`, naming the head's address and how to resume, within `head_timeout` + 5 s
  (never Ray's own end of the process a minute later); the same call with `execution="local"` then resumes from the
  store, computes only what was not stored, and its provenance names the session the head's loss stopped.

The simulated generator takes `image.seconds` per image (a config of this test), so that a kill lands mid-run. One
cluster serves the module (`clusters`); the head-loss test, which ends it, goes last, and a test that finds its head
gone gets a new one.
"""
import json, subprocess, sys, time
from pathlib import Path

import pandas as pd
import pytest
from report_files import report_file

ray = pytest.importorskip("ray")

from acrb_nb.store import ItemStore
from acrb_nb.acrb.pipeline import run_acrb, model_ref, execution_provenance
from acrb_nb.testing import FakeOpenAI
from ray_cluster import LocalCluster
from cluster_driver import TEXTS

AREA = "kill-resume"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).resolve().parent / "cluster_driver.py"
KEY = "sk-cluster-test-0123456789"  # the nodes' OPENAI_API_KEY (a fake key for the loopback server)
HEAD_TIMEOUT = 30  # Execution's default head_timeout: the head-loss drivers do not set it


class Clusters:
    "The module's cluster, started when first asked for; a test that finds its head killed gets a new one."
    def __init__(self): self.c = None
    def get(self, nodes: int = 2, wait: bool = True) -> LocalCluster:
        "A cluster with `nodes` nodes up (with `wait`: and a driver sees all their CPUs)."
        if self.c is not None and not self.c.head_up: self.stop()
        if self.c is None: self.c = LocalCluster(nodes=nodes, env={"OPENAI_API_KEY": KEY, "ACRB_PROGRESS": "0"})
        else: self.c.ensure_nodes(nodes, wait)
        return self.c
    def stop(self):
        if self.c is not None: self.c.stop()
        self.c = None


@pytest.fixture(scope="module")
def clusters():
    cs = Clusters()
    try: yield cs
    finally: cs.stop()


@pytest.fixture
def cluster(clusters):
    return clusters.get(2)


@pytest.fixture(scope="module")
def slow_config(tmp_path_factory):
    "The shipped planted rates, each simulated image taking 0.15 s."
    p = tmp_path_factory.mktemp("cfg") / "slow.yaml"
    p.write_text("extends: planted_acrb.yaml\nimage:\n  size: 64\n  seconds: 0.15\n")
    return p


@pytest.fixture(scope="module")
def local_audit(tmp_path_factory, slow_config):
    "What the node-loss and head-loss audits must equal: the same spec on the local executor (4 threads)."
    return run_acrb(model_ref("sim", "t2i", config=slow_config), attributes=["culture"], n_base_prompts=4,
                    analysis={"n_boot": 100}, run_dir=tmp_path_factory.mktemp("local") / "run", execution={"max_workers": 4})


def summary(res):
    return {k: v for k, v in res.summary.items() if k not in ("run_id", "timestamp")}


def stored(d) -> dict:
    "key -> (status, outcome, record) of a run folder's store."
    return {e["key"]: (e["status"], e["outcome"], e["record"]) for e in ItemStore(Path(d) / "items.sqlite").entries()}


def canon(x) -> str:
    "A summary as JSON text (NaN compares equal to NaN there)."
    return json.dumps(x, sort_keys=True, default=str)


def sim_picture(prompt, size, inputs):
    "What the fake image API draws: the sim generator's image of the prompt (the sim judge reads its planted cue)."
    from acrb_nb.adapters.sim import SimImageGenerator
    from acrb_nb.testing.content import default_image
    return SimImageGenerator(size=64).generate(prompt.split("\n#")[0], seed=0).image or default_image(prompt, size, inputs)


def driver(cluster, *args, env=None):
    "Start the driver process (`cluster_driver.py <args>`) with the cluster's environment (and `env`: fault points, ...)."
    return subprocess.Popen([sys.executable, str(DRIVER), *map(str, args)], env={**cluster.env, **(env or {})}, cwd=str(ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(p, timeout=240) -> dict:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, (out + err)[-4000:]
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]  # Ray may print a lost node's logs after it
    return json.loads(line.removeprefix("RESULT "))


def wait_done(store_path, n, p, timeout=120):
    "Block until the store holds `n` finished items (the driver must still be running)."
    t0 = time.time()
    while not Path(store_path).exists() or ItemStore(store_path).counts()["done"] < n:
        assert p.poll() is None, p.communicate()
        assert time.time() - t0 < timeout, "the run did not reach the kill point"
        time.sleep(0.05)
    return ItemStore(store_path).counts()["done"]


def test_audit_and_scoring_on_two_nodes_equal_local(cluster, tmp_path, slow_config, monkeypatch):
    """The ACRB report from the CLI with `--ray-address`, then toxicity scoring and an API generator's audit from driver
    scripts: both nodes computed items, and every stored record and metric equals the local executor's. The CLI shows
    the report's progress as it runs (the workers starting, each stage), and Ray's connection lines stay out of it."""
    cmd = [str(Path(sys.executable).parent / "acrb-report"), "acrb", "-p", "model", "sim", "-p", "sim_config_file",
           str(slow_config), "-p", "n_base_prompts", "3", "-y", "attributes: [culture]", "-p", "n_boot", "100",
           "-p", "run_dir", str(tmp_path / "run"), "--execution", "ray", "--ray-address", cluster.address, "--ray-num-actors", "2",
           "--ray-batch-size", "2", "--nbs", str(ROOT / "nbs"), "--out", str(tmp_path / "reports")]
    p = subprocess.run(cmd, cwd=tmp_path, env={**cluster.env, "ACRB_PROGRESS": "1"}, capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    for phase in ("starting Ray workers: ", "stage II: 21/21 items", "cue judge judge: "):  # as locally, and the start
        assert f"acrb/sim · {phase}" in p.stderr, p.stderr[-3000:]
    assert all(n.alive for n in cluster.nodes)                     # the report's driver left; the cluster runs on
    nb = json.loads((report_file(tmp_path / "reports", "acrb", "sim", ".ipynb")).read_text())
    assert nb["metadata"]["papermill"]["parameters"]["execution"] == {"executor": "ray", "address": cluster.address,
                                                                       "num_actors": 2, "batch_size": 2}
    man = json.loads((tmp_path / "run" / "manifest.json").read_text())
    ex = man["sessions"][-1]["execution"]
    assert (ex["executor"], ex["address"]) == ("ray", cluster.address)
    for stage in ("stage2", "judge"):
        nodes = ex["stages"][stage]["nodes"]
        assert len(nodes) == 2 and all(n["items"] > 0 for n in nodes.values()), ex["stages"]
    items = ItemStore(tmp_path / "run" / "items.sqlite").entries()
    assert {e["node"] for e in items} == set(ex["stages"]["stage2"]["nodes"])   # each item's node, stored with it
    html = (report_file(tmp_path / "reports", "acrb", "sim")).read_text()
    ray_lines = ("Connecting to existing Ray cluster", "Connected to Ray cluster", "INFO worker.py", "authentication_token")
    assert not any(s in html + json.dumps(nb) for s in ray_lines), [s for s in ray_lines if s in html + json.dumps(nb)]
    assert "ray × 2 workers on 2 nodes" in html and all(f"items computed on node {n[:8]}" in html for n in ex["stages"]["stage2"]["nodes"])
    # one driver at a time (two would share the cluster's 2 CPUs: each could get one node); the local runs meanwhile
    tox = driver(cluster, "toxicity", cluster.address, tmp_path / "tox")
    # the same spec on the local executor: the same records and metrics; it resumes the cluster's folder with no call
    kw = dict(attributes=["culture"], n_base_prompts=3, judge="sim,clip:sim", analysis={"n_boot": 100})  # the report's judges
    loc = run_acrb(model_ref("sim", "t2i", config=slow_config), run_dir=tmp_path / "local", execution={"max_workers": 4}, **kw)
    assert stored(tmp_path / "run") == stored(tmp_path / "local")
    again = run_acrb(model_ref("sim", "t2i", config=slow_config), run_dir=tmp_path / "run", **kw)
    assert again.run.store.counters()["calls"] == loc.run.store.counters()["calls"] and summary(again) == summary(loc)
    # toxicity scoring: rows on both nodes, scores bit-identical to the local executor's (one torch thread on both sides)
    ray_tox = result(tox)
    srv = FakeOpenAI(image_fn=sim_picture).start()
    api = driver(cluster, "acrb-api", cluster.address, tmp_path / "api", env={"OPENAI_BASE_URL": srv.base_url})
    try: _scoring_and_api_equal_local(tmp_path, ray_tox, api, srv, monkeypatch)
    finally:
        if api.poll() is None: api.kill()
        srv.stop()


def _scoring_and_api_equal_local(tmp_path, ray_tox, api, srv, monkeypatch):
    "The toxicity driver's scores and the API driver's audit against the same specs on the local executor."
    import torch
    from acrb_nb.toxicity.zeroshot import score_dataset
    from acrb_nb.toxicity.options import ScoreOptions
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        df = pd.DataFrame({"text": TEXTS, "label": [i % 2 for i in range(len(TEXTS))]})
        loc_tox = score_dataset(df, "tiny-gpt2", label_col="label", score_options=ScoreOptions(batch_size=4), run=tmp_path / "tox-local")
    finally: torch.set_num_threads(n)
    assert ray_tox["summary"]["executor"] == "ray" and len(ray_tox["summary"]["nodes"]) == 2, ray_tox["summary"]
    assert ray_tox["scores"] == loc_tox.rows["score"].tolist()
    assert stored(tmp_path / "tox") == stored(tmp_path / "tox-local")
    # the API audit: generation on the driver's threads (one request per image), its judge on the cluster's workers
    api_summary = result(api)
    calls = srv.count_by_prompt()
    man = json.loads((tmp_path / "api" / "manifest.json").read_text())
    st = man["sessions"][-1]["execution"]["stages"]
    assert st["stage2"]["executor"] == "local" and "API-bound" in st["stage2"]["placement"], st
    assert st["judge"]["executor"] == "ray" and st["judge"]["nodes"], st
    assert calls and set(calls.values()) == {1}, calls                          # every image requested once
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    api_local = run_acrb("gpt-image-1", attributes=["gender"], n_base_prompts=2, judge="sim", analysis={"n_boot": 100},
                         run_dir=tmp_path / "api-local")
    # the metrics and each item's outcome, image and verdict (an API response's own ids and timings differ per call)
    assert canon(api_summary) == canon(summary(api_local))
    what = lambda d: {k: (v[1], (v[2] or {}).get("image_sha256"), (v[2] or {}).get("cue")) for k, v in stored(d).items()}
    assert what(tmp_path / "api") == what(tmp_path / "api-local")


def test_node_lost_mid_run_loses_nothing(cluster, tmp_path, slow_config, local_audit, reliability):
    """The second node is SIGKILLed (raylet and workers, by pid) while it computes: the ACRB audit finishes on the head
    node with the local run's metrics, every item stored once; then again under a pool calling a loopback OpenAI
    server: the server never saw a finished item's prompt twice."""
    run_dir = tmp_path / "audit"
    p = driver(cluster, "acrb", cluster.address, run_dir, slow_config, 4)
    before = wait_done(run_dir / "items.sqlite", 6, p)
    killed = cluster.nodes[1].kill()
    assert killed, "no process of the second node found"
    res = result(p)
    assert canon(res) == canon(summary(local_audit))                            # the metrics equal the local run's
    assert stored(run_dir) == stored(local_audit.run.dir)
    entries = ItemStore(run_dir / "items.sqlite").entries()
    assert {e["attempts"] for e in entries} == {1}                              # no finished item recomputed
    man = json.loads((run_dir / "manifest.json").read_text())
    st2 = man["sessions"][-1]["execution"]["stages"]["stage2"]
    assert len(st2["nodes"]) == 2                                               # both nodes worked before the loss
    # the manifest keeps the loss: the node gone, its workers' deaths, the items sent again and the node that finished each
    assert st2["worker_deaths"] >= 1 and len(st2["nodes_lost"]) == 1 and set(st2["nodes_lost"]) < set(st2["nodes"]), st2
    (lost,), (survivor,) = st2["nodes_lost"], set(st2["nodes"]) - set(st2["nodes_lost"])
    assert st2["resubmitted"] and set(st2["resubmitted"].values()) == {survivor}, st2
    assert {d["node"] for d in st2["deaths"]} == {lost}, st2["deaths"]
    prov = execution_provenance(man)                                            # the report's provenance rows
    assert f"node lost: node {lost[:8]}" in prov["Ray losses: stage2"], prov
    assert f"finished on node {survivor[:8]}: {len(st2['resubmitted'])}" in prov["Ray losses: stage2"], prov
    lost_audit = len(stored(local_audit.run.dir)) - len(entries)

    # a loopback API behind the workers: what a lost node costs in paid calls
    cluster.add_node()
    cluster.wait_cpus(2)
    with FakeOpenAI(latency=0.25) as srv:
        store = tmp_path / "pool" / "items.sqlite"
        p = driver(cluster, "pool", cluster.address, store, srv.base_url, 24)
        wait_done(store, 6, p)
        cluster.nodes[-1].kill()
        done_at_kill = {e["record"]["prompt"] for e in ItemStore(store).entries(status="done")}
        res = result(p)
        calls = srv.count_by_prompt()
    assert res["done"] == 24 and res["failed"] == 0 and res["worker_deaths"] >= 1, res
    assert len(res["nodes"]) == 2, res                                          # both nodes had worked
    repeated = [q for q in done_at_kill if calls.get(q, 0) != 1]
    assert not repeated, repeated                                               # no finished item's call repeated
    assert set(calls) == {e["record"]["prompt"] for e in ItemStore(store).entries(status="done")}
    reliability.add("kill-resume", nodes_killed=2, node_items_lost=lost_audit + 24 - res["done"],
                    node_calls_repeated=len(repeated) + sum(e["attempts"] - 1 for e in entries), node_items=before)


HEAD_FAULTS = {"mid-stage": "item:1:6", "between-stages": "pool_start:2", "pool-start": "workers_requested:2"}


@pytest.mark.budget(cpu=80, why="three drivers on a two-node cluster, each waiting out the default head_timeout (30 s) the issue asks for")
def test_head_lost_mid_stage_between_stages_and_at_pool_start(clusters, tmp_path, slow_config, local_audit, reliability):
    """The head (its GCS, raylet, agents) is SIGKILLed while three drivers of the same audit stand at their fault points
    — mid Stage II, between Stage II and the judge, in the judge pool's start — each attached to the other node, with the
    default head_timeout: each stops with `RayHeadLost` naming the head's address and how to resume, within
    head_timeout + 5 s of the kill; the same call on the local executor computes only the items not stored, the metrics
    equal a clean local run's, and the provenance names the session the head's loss stopped."""
    c = clusters.get(2, wait=False)              # the drivers join the new node once it has joined the head
    attach = [n for n in c.nodes[1:] if n.up][-1]                   # a driver on another machine than the head's
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = {name: driver(c, "acrb", c.address, tmp_path / name, slow_config, 4, env={
        "CLUSTER_FAULT": spec, "CLUSTER_NAME": name, "CLUSTER_BARRIER": str(barrier), "CLUSTER_ATTACH": str(attach.temp_dir),
        "CLUSTER_NUM_CPUS": "0.5", "CLUSTER_NUM_ACTORS": "1"}) for name, spec in HEAD_FAULTS.items()}  # 3 pools of one worker
    try:
        t0 = time.time()
        while not all((barrier / f"{n}.ready").exists() for n in procs):
            for n, p in procs.items(): assert p.poll() is None, (n, p.communicate())
            assert time.time() - t0 < 240, "the drivers did not reach their fault points"
            time.sleep(0.05)
        c.nodes[0].kill()                                          # returns once the head's processes are gone
        killed = time.time()
        (barrier / "killed").write_text(repr(killed))              # the drivers go on from their fault points
        ended = {}
        while len(ended) < len(procs) and time.time() - killed < HEAD_TIMEOUT + 60:
            ended.update({n: time.time() - killed for n, p in procs.items() if n not in ended and p.poll() is not None})
            time.sleep(0.05)
    finally:
        for p in procs.values():
            if p.poll() is None: p.kill()
    outs = {n: p.communicate() for n, p in procs.items()}
    for n, (out, err) in outs.items():
        assert n in ended and procs[n].returncode != 0, (n, out[-2000:], err[-3000:])
        assert f"head at {c.address} has not answered" in err and "--execution local" in err, (n, err[-3000:])
        assert "HEADLOST" in err and "Failed to connect to GCS" not in err, (n, err[-3000:])
        assert ended[n] <= HEAD_TIMEOUT + 5, (n, ended, err[-2000:])   # the acceptance bound (the head watch, not Ray's 60 s)
    calls, repeated, at_kill = local_audit.run.store.counters()["calls"], 0, 0
    for n in procs:
        run_dir = tmp_path / n
        have = ItemStore(run_dir / "items.sqlite").counts()["done"]
        again = run_acrb(model_ref("sim", "t2i", config=slow_config), attributes=["culture"], n_base_prompts=4,
                         analysis={"n_boot": 100}, run_dir=run_dir, execution={"max_workers": 4})
        assert summary(again) == summary(local_audit), n
        assert stored(run_dir) == stored(local_audit.run.dir), n
        entries = ItemStore(run_dir / "items.sqlite").entries()
        assert {e["attempts"] for e in entries} == {1}, n                    # nothing computed twice ...
        assert again.run.store.counters()["calls"] == calls, n               # ... and every call made once, over both sessions
        assert 0 < have < len(entries), (n, have)                           # the cluster had done some, not all
        repeated, at_kill = repeated + sum(e["attempts"] - 1 for e in entries), at_kill + have
        prov = execution_provenance(json.loads((run_dir / "manifest.json").read_text()))
        first = [v for k, v in prov.items() if k.startswith("earlier session 1 ")]
        assert first and f"failed (RayHeadLost: the Ray cluster's head at {c.address} has not answered" in first[0], prov
    print({n: round(t, 1) for n, t in ended.items()}, "s from the head's kill to each driver's end")
    reliability.add("kill-resume", heads_killed=1, node_items=at_kill, node_calls_repeated=repeated)
