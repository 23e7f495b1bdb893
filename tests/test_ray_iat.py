"""The IAT study on the Ray executor (`execution="ray"`) on a local 2-CPU Ray: the same keys, records, results and
effects as the local executor (seed and text designs, images and trials), resuming across executors, and a worker
killed (SIGKILL) mid-run whose trials are resubmitted and stored exactly once.

The slow judge of the kill test is an `AdapterRef` subclass defined inside the test, so that cloudpickle ships it to
the workers by value (the tests folder is not importable there).
"""
import dataclasses, os, signal, threading, time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from acrb_nb.core import RunSpec
from acrb_nb.store import ItemStore, Run
from acrb_nb.execution import Execution, AdapterRef
from acrb_nb.adapters.sim import SimImageGenerator, SimVisionJudge
from acrb_nb.iat import (iat_study, load_iat_config, plan_profiles, needed_profiles, generate_profiles, attach_images,
                         make_trials, run_trials, trial_results, TextChoiceRef)

pytestmark = [pytest.mark.usefixtures("local_ray"), pytest.mark.timeout(300)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
RAY2 = Execution.of({"executor": "ray", "num_actors": 2, "batch_size": 4, "progress": False})
QUIET = {"progress": False}  # the local executor, without progress bars
ARGS = dict(dimensions=["socioeconomic_status"], pairs_per_combo=2, words=3, analysis={"n_boot": 200, "n_perm": 200})



def stored(path):
    "key -> (status, outcome, error_kind, record) of a run's store, without wall-clock fields."
    out = {}
    for e in ItemStore(Path(path) / "items.sqlite").entries():
        r = dict(e["record"] or {}); r.pop("usage", None)
        if isinstance(r.get("metadata"), dict): r["metadata"] = {k: v for k, v in r["metadata"].items() if k != "seconds"}
        out[e["key"]] = (e["status"], e["outcome"], e["error_kind"], r)
    return out


def results(st):
    "Scored results without the image paths (they name each run's folder)."
    return st.results.drop(columns=["images"]).reset_index(drop=True)


@pytest.mark.parametrize("design", ["seed", "paired"])
def test_sim_study_on_ray_equals_local_and_resumes_across_executors(tmp_path, design):
    loc = iat_study("sim", design, run_dir=tmp_path / "local", execution=QUIET, **ARGS)
    t0 = time.monotonic()
    rr = iat_study("sim", design, run_dir=tmp_path / "ray", execution=RAY2, **ARGS)
    ray_s = time.monotonic() - t0
    assert (rr.images_summary["executor"], rr.summary["executor"], rr.summary["actors"]) == ("ray", "ray", 2)
    assert (loc.images_summary["executor"], loc.summary["executor"]) == ("local", "local")
    assert rr.summary["done"] == len(rr.trials) and rr.summary["worker_deaths"] == 0
    assert rr.judge_info == loc.judge_info
    assert stored(rr.run_dir) == stored(loc.run_dir)                       # trials: keys and records
    assert stored(rr.run_dir / "images") == stored(loc.run_dir / "images")  # images: keys, blob paths, hashes
    for rec in (e[3] for e in stored(rr.run_dir / "images").values()):    # the blobs came back from the workers
        assert (rr.run_dir / "images" / rec["image"]).read_bytes() == (loc.run_dir / "images" / rec["image"]).read_bytes()
    pd.testing.assert_frame_equal(results(rr), results(loc))
    pd.testing.assert_frame_equal(rr.effects, loc.effects)
    assert rr.results_path.read_text().count("\n") == len(rr.trials)
    # the local executor over the Ray-filled folder repeats no call, and Ray over it starts no worker
    calls = ItemStore(rr.run_dir / "items.sqlite").counters()["calls"]
    again = iat_study("sim", design, run_dir=tmp_path / "ray", execution=QUIET, **ARGS)
    assert (again.summary["called"], again.summary["cached"], again.images_summary["called"]) == (0, len(rr.trials), 0)
    assert ItemStore(rr.run_dir / "items.sqlite").counters()["calls"] == calls
    pd.testing.assert_frame_equal(again.effects, loc.effects)
    t0 = time.monotonic()
    ray_again = iat_study("sim", design, run_dir=tmp_path / "ray", execution=RAY2, **ARGS)
    assert ray_again.summary["called"] == 0 and ray_again.summary["executor"] == "ray"
    print(f"{design}: {len(rr.trials)} trials, Ray run {ray_s:.1f} s, cached Ray re-run {time.monotonic() - t0:.1f} s")


def test_text_design_on_ray_equals_local(tmp_path):
    kw = dict(dimensions=["gender"], words=3, analysis={"n_boot": 100, "n_perm": 100})
    loc = iat_study("sim", "text", run_dir=tmp_path / "local", execution=QUIET, **kw)
    rr = iat_study("sim", "text", run_dir=tmp_path / "ray", execution=RAY2, **kw)
    assert rr.summary["executor"] == "ray" and rr.images_summary is None
    assert rr.judge_info == loc.judge_info and rr.judge_info["backend"] == "text-choice"
    assert stored(rr.run_dir) == stored(loc.run_dir)
    pd.testing.assert_frame_equal(rr.results, loc.results)


def test_local_model_instances_and_api_judges(tmp_path):
    cfg = load_iat_config().select(["gender"], 2, 0)
    plan = plan_profiles(cfg, k=1, seed=0)
    with Run(RunSpec("iat-images", "sim", {"t": 1}, 0), run_dir=tmp_path / "img") as irun:
        pool = generate_profiles(SimImageGenerator(), needed_profiles(plan, cfg), irun, cfg).rows
    trials = make_trials(attach_images(plan, pool), cfg, "seed", 0)
    with pytest.raises(TypeError, match="AdapterRef.of"):                 # a loaded local model cannot be shipped
        run_trials(SimVisionJudge(), trials, ItemStore(tmp_path / "x.sqlite"), execution="ray")
    with pytest.raises(TypeError, match="AdapterRef.of"):
        with Run(RunSpec("iat-images", "sim", {"t": 2}, 0), run_dir=tmp_path / "img2") as irun:
            generate_profiles(SimImageGenerator(), needed_profiles(plan, cfg), irun, cfg, execution="ray")
    ref = AdapterRef.of("vision_judge", "gpt-4o-mini-judge")              # API-bound: stays on threads
    from acrb_nb.execution import placement
    assert placement(ref, RAY2)[0] == "local"
    assert placement(TextChoiceRef.of("gpt-4o-mini"), RAY2)[0] == "local"
    assert placement(TextChoiceRef.of("smollm2-135m"), RAY2)[0] == "ray"


@pytest.mark.slow
def test_tiny_vlm_judge_on_ray_equals_local(tmp_path):
    """A real VLM class, `tiny-qwen2-vl` (random weights), named by an `AdapterRef`: six trials on two Ray workers with
    one torch thread each equal one local thread byte for byte (registered local judges read label log-probabilities
    by default, `adapters.labels`; whatever the outcome, both executors must store the same records)."""
    import torch
    from collections import Counter
    cfg = load_iat_config().select(["socioeconomic_status"], 4, 0)
    plan = plan_profiles(cfg, k=1, seed=0)
    with Run(RunSpec("iat-images", "sim", {"vlm": 1}, 0), run_dir=tmp_path / "img") as irun:
        pool = generate_profiles(SimImageGenerator(), needed_profiles(plan, cfg), irun, cfg).rows
    trials = make_trials(attach_images(plan, pool), cfg, "seed", 0)[::4]  # 6 of 24, spread over the pairs and words
    assert len(trials) == 6
    qref = AdapterRef.of("vision_judge", "tiny-qwen2-vl")
    th = torch.get_num_threads(); torch.set_num_threads(1)
    try: q_loc = run_trials(qref, trials, ItemStore(tmp_path / "qwen_local" / "items.sqlite"), execution={"max_workers": 1, "progress": False})
    finally: torch.set_num_threads(th)
    q_ray = run_trials(qref, trials, ItemStore(tmp_path / "qwen_ray" / "items.sqlite"),
                       execution={"executor": "ray", "num_actors": 2, "torch_threads": 1, "batch_size": 2, "progress": False})
    assert q_ray.summary["executor"] == "ray" and q_ray.summary["done"] == 6
    assert q_ray.model_info == q_loc.model_info
    got, want = stored(tmp_path / "qwen_ray"), stored(tmp_path / "qwen_local")
    assert got == want and len(got) == 6
    print(Counter(v[1] for v in got.values()))


@pytest.mark.slow
def test_worker_killed_mid_run_is_recovered_and_every_trial_stored_once(tmp_path):
    pid_dir = tmp_path / "pids"; pid_dir.mkdir()

    @dataclasses.dataclass(frozen=True)
    class SlowSim(AdapterRef):
        "The sim judge, 50 ms a trial, each created copy writing its process id to pid_dir."
        pid_dir: str = ""
        def create(self):
            j = AdapterRef.create(self)
            (Path(self.pid_dir) / f"{os.getpid()}-{time.monotonic_ns()}").write_text(str(os.getpid()))
            judge = j.judge
            def slow(*a, **kw):
                time.sleep(0.05)
                return judge(*a, **kw)
            j.judge = slow
            return j

    base = AdapterRef.of("vision_judge", "sim")
    ref = SlowSim(base.kind, base.name, base.kwargs, str(pid_dir))
    cfg = load_iat_config().select(["socioeconomic_status"], 8, 0)
    plan = plan_profiles(cfg, k=2, seed=0)
    with Run(RunSpec("iat-images", "sim", {"kill": 1}, 0), run_dir=tmp_path / "img") as irun:
        pool = generate_profiles(SimImageGenerator(), needed_profiles(plan, cfg), irun, cfg).rows
    trials = make_trials(attach_images(plan, pool), cfg, "seed", 0)
    n = len(trials)
    assert n == 3 * 2 * 2 * 8
    run = Run(RunSpec("iat", "sim", {"kill": 1}, 0), run_dir=tmp_path / "ray")
    ex = Execution.of({"executor": "ray", "num_actors": 2, "batch_size": 4, "max_restarts": 3, "progress": False})
    out = {}
    t = threading.Thread(target=lambda: out.update(df=run_trials(ref, trials, run, execution=ex)))
    t.start()
    watch = ItemStore(run.store.path)        # a second connection, as another process would read the WAL store

    def wait(cond, what, limit=120):
        t0 = time.time()
        while not cond():
            assert time.time() - t0 < limit and t.is_alive(), f"run ended or stalled before {what}"
            time.sleep(0.01)
    wait(lambda: len(list(pid_dir.iterdir())) >= 2, "both workers started")
    victim = int(sorted(pid_dir.iterdir())[0].read_text())
    wait(lambda: watch.counts()["done"] >= 20, "the kill point")
    os.kill(victim, signal.SIGKILL)          # the kernel's OOM killer, say
    killed_at = watch.counts()["done"]
    t.join(240)
    assert not t.is_alive()
    assert killed_at < n, "the kill landed after the run"
    s = out["df"].summary
    assert (s["executor"], s["done"], s["failed"], s["cached"]) == ("ray", n, 0, 0), s
    # (whether the restarted worker rejoins before the other one finishes the queue is a matter of timing: not checked)
    assert s["worker_deaths"] == 1 and s["resubmitted_items"] >= 1, s
    entries = watch.entries()
    assert len(entries) == n and {e["status"] for e in entries} == {"done"}
    assert {e["attempts"] for e in entries} == {1}                          # each trial written exactly once
    assert watch.counters()["calls"] == n
    # the same trials on the local executor give the same records and results
    loc = Run(RunSpec("iat", "sim", {"kill": 1}, 0), run_dir=tmp_path / "local")
    info = run_trials(SimVisionJudge(), trials, loc, execution={"max_workers": 2, "progress": False}).model_info
    assert stored(run.dir) == stored(loc.dir)
    pd.testing.assert_frame_equal(trial_results(run, trials, info), trial_results(loc, trials, info))
    print(f"{n} trials, worker {victim} killed after {killed_at}; resubmitted {s['resubmitted_items']}")
