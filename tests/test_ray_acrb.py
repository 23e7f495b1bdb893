"""The ACRB audit (`run_acrb`) with `execution="ray"` on a local
2-CPU Ray: the same results as the local executor on tiny real models (tiny-sd generator + tiny-clip cue scorer),
and a Ray worker SIGKILLed in the middle of Stage II without losing or repeating a finished item. (The report from the
command line with `--execution ray --ray-address` runs on a real two-node cluster in test_ray_cluster.py.)
"""
import json, os, signal, threading, time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from acrb_nb.store import ItemStore
from acrb_nb.ray_exec import ray_init
from acrb_nb.acrb.pipeline import run_acrb
from ray_cluster import ppid

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[1]
TINY = dict(attributes=["culture"], n_base_prompts=2, analysis={"n_boot": 100})



def results(res):
    "What an audit found: summary without run id / timestamp, and the per-item Stage III verdicts."
    s = {k: v for k, v in res.summary.items() if k not in ("run_id", "timestamp")}
    cols = ["key", "final_outcome", "image_sha256", "judge_cue", "judge_prob"]
    return s, res.stage3[cols].reset_index(drop=True)


def ray_worker_pids():
    """Process ids of live acrb_nb Ray workers of *this* process's local Ray (Ray names an actor's process
    `ray::_Worker...`; it is a child of the raylet, a child of this process). Another test process's Ray — a parallel
    pytest worker's — is not touched."""
    me, pids = os.getpid(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit(): continue
        try: cmd = (d / "cmdline").read_bytes()
        except OSError: continue
        if cmd.startswith(b"ray::_Worker") and ppid(ppid(int(d.name))) == me: pids.append(int(d.name))
    return sorted(pids)


@pytest.fixture(scope="module")
def tiny_local(tmp_path_factory):
    "The tiny-sd audit (2 images per prompt) on the local executor with one torch thread, as the Ray workers have."
    import torch
    threads = torch.get_num_threads(); torch.set_num_threads(1)  # CPU float sums depend on the thread count
    try: return run_acrb("tiny-sd", run_dir=tmp_path_factory.mktemp("tiny") / "local", images_per_prompt=2, **TINY)
    finally: torch.set_num_threads(threads)


@pytest.mark.slow
def test_tiny_models_on_ray_equal_local_executor(tmp_path, local_ray, tiny_local):
    on_ray = run_acrb("tiny-sd", run_dir=tmp_path / "ray", images_per_prompt=2,
                      execution={"executor": "ray", "num_actors": 2, "torch_threads": 1, "batch_size": 4}, **TINY)
    local = tiny_local
    s_r, d_r = results(on_ray)
    s_l, d_l = results(local)
    assert s_r == s_l
    pd.testing.assert_frame_equal(d_r, d_l)
    assert on_ray.summary["judges"] == ["clip:tiny-clip"]
    assert (d_r.final_outcome == "generated").sum() > 0 and d_r.judge_cue.notna().sum() > 0
    man = json.loads((on_ray.run.dir / "manifest.json").read_text())
    stages = man["sessions"][-1]["execution"]["stages"]
    assert stages["stage2"]["executor"] == "ray" and stages["judge"]["executor"] == "ray"
    assert man["models"]["generator"] == json.loads((local.run.dir / "manifest.json").read_text())["models"]["generator"]
    # the Ray-filled folder resumed by the local executor: nothing is called again
    calls = on_ray.run.store.counters()["calls"]
    again = run_acrb("tiny-sd", run_dir=tmp_path / "ray", images_per_prompt=2, **TINY)
    assert again.run.store.counters()["calls"] == calls and results(again)[0] == s_r


def summary(res):
    "The metrics of an audit without its run id and timestamp."
    return {k: v for k, v in res.summary.items() if k not in ("run_id", "timestamp")}


def stored(st):
    "key -> (status, outcome, record) of a store, without wall-clock fields (usage, metadata.seconds)."
    out = {}
    for e in st.entries():
        r = dict(e["record"] or {}); r.pop("usage", None)
        if isinstance(r.get("metadata"), dict): r["metadata"] = {k: v for k, v in r["metadata"].items() if k != "seconds"}
        out[e["key"]] = (e["status"], e["outcome"], r)
    return out


@pytest.mark.parametrize("mode,kw", [("t2i", dict(attributes=["culture"], n_base_prompts=9)),
                                     ("i2i", dict(attributes=["disability"], n_base_prompts=3))])
def test_sim_audit_on_ray_equals_local_and_resumes_both_ways(tmp_path, local_ray, mode, kw):
    """The simulator's generator (T2I) or editor (I2I: the source images go to the workers as bytes) and its VLM cue
    judge on two Ray workers: every stored record (Stage II outcomes, provider codes, images; judge verdicts) and the
    metrics equal the local executor's; the local executor over the Ray folder calls nothing, and (T2I) neither does Ray
    over the local folder."""
    kw = dict(mode=mode, analysis={"n_boot": 100}, **kw)
    ray2 = {"executor": "ray", "num_actors": 2, "batch_size": 4}
    loc = run_acrb("sim", run_dir=tmp_path / "local", **kw)
    if mode == "t2i":  # Ray resumes the local folder: no call (one worker is enough to ask the model's describe())
        calls = loc.run.store.counters()["calls"]
        over_local = run_acrb("sim", run_dir=tmp_path / "local", execution={"executor": "ray", "num_actors": 1}, **kw)
        assert over_local.run.store.counters()["calls"] == calls and summary(over_local) == summary(loc)
    on_ray = run_acrb("sim", run_dir=tmp_path / "ray", execution=ray2, **kw)
    assert summary(on_ray) == summary(loc)
    cols = ["key", "final_outcome", "code", "image_sha256", "judge_outcome", "judge_cue", "judge_confidence", "judge_evidence"]
    pd.testing.assert_frame_equal(on_ray.stage3[cols].reset_index(drop=True), loc.stage3[cols].reset_index(drop=True))
    assert stored(on_ray.run.store) == stored(loc.run.store)
    man, man_l = (json.loads((r.run.dir / "manifest.json").read_text()) for r in (on_ray, loc))
    stages = man["sessions"][-1]["execution"]["stages"]
    assert (stages["stage2"]["executor"], stages["judge"]["executor"]) == ("ray", "ray")
    assert man["models"] == man_l["models"]                                   # describe() asked of a worker
    calls = on_ray.run.store.counters()["calls"]
    again = run_acrb("sim", run_dir=tmp_path / "ray", **kw)                   # the local executor resumes the Ray folder
    assert again.run.store.counters()["calls"] == calls and summary(again) == summary(loc)


@pytest.mark.slow
def test_worker_killed_during_stage2_loses_only_its_item(tmp_path, local_ray, tiny_local):
    n_items = 2 * 7 * 2  # 2 base prompts x (6 cultures + neutral) x 2 images
    run_dir = tmp_path / "killed"
    out, killed = {}, []

    def audit():
        try:
            out["res"] = run_acrb("tiny-sd", run_dir=run_dir, images_per_prompt=2,
                                  execution={"executor": "ray", "num_actors": 2, "batch_size": 3, "torch_threads": 1}, **TINY)
        except BaseException as e: out["error"] = e

    t = threading.Thread(target=audit); t.start()
    t0 = time.time()
    while not (run_dir / "items.sqlite").exists():
        assert time.time() - t0 < 120 and t.is_alive(), f"the run did not start: {out.get('error')}"
        time.sleep(0.05)
    watch = ItemStore(run_dir / "items.sqlite")
    while watch.counts()["done"] < 8:  # mid Stage II: some images stored, most to come
        assert time.time() - t0 < 300 and t.is_alive(), f"the run ended before the kill point: {out.get('error')}"
        time.sleep(0.02)
    pids = ray_worker_pids()
    assert pids, "no Ray worker process found"
    os.kill(pids[0], signal.SIGKILL); killed.append(pids[0])
    t.join(500)
    assert not t.is_alive() and "error" not in out, out.get("error")
    res = out["res"]
    assert res.summary["total_samples"] == n_items and res.summary["total_failed"] == 0
    entries = [e for e in watch.entries() if e["record"] and e["record"].get("stage") == "stage2"]
    assert len(entries) == n_items
    assert {e["attempts"] for e in entries} == {1}  # every key written once: no finished item was redone
    assert killed[0] not in ray_worker_pids()
    # same metrics as a clean run of the same spec on the local executor
    assert results(res)[0] == results(tiny_local)[0]
