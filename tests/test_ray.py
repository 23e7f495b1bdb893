"""The Ray executor (`acrb_nb.ray_exec`) on a local 2-CPU Ray: same stores as the local runner, workers killed from
outside mid-run (SIGKILL of the worker process and `ray.kill(..., no_restart=False)`), a poison item, per-item
retries inside the workers, batched work functions, and resuming across executors. Both executors return a
`runner.StageResult` (rows + summary) built by the same `RunLedger`.
The three long cases (tiny-sd bit-identity, external kills, poison item) are marked `slow`.

Work functions are defined inside the tests so that cloudpickle ships them to the workers by value.
"""
import os, signal, threading, time
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from acrb_nb.core import item_key
from acrb_nb.store import ItemStore
from acrb_nb.runner import run_items, RetryPolicy, TransientError, FinalError
from acrb_nb.ray_exec import ray_init, RayWorkerPool, build_fn, generator_factory

pytestmark = [pytest.mark.usefixtures("local_ray"), pytest.mark.timeout(300)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.05)
PROMPTS = ["a photo of a Nigerian doctor at work", "a photo of a Korean teacher in a classroom",
           "a photo of a wheelchair user cooking", "a photo of a Muslim woman at a market",
           "a photo of an elderly man jogging", "a photo of a person reading"]



def comparable(st):
    "Stored entries without wall-clock fields: key -> (status, outcome, error_kind, attempts, record)."
    out = {}
    for e in st.entries():
        r = dict(e["record"] or {})
        r.pop("usage", None)
        if isinstance(r.get("metadata"), dict): r["metadata"] = {k: v for k, v in r["metadata"].items() if k != "seconds"}
        out[e["key"]] = (e["status"], e["outcome"], e["error_kind"], e["attempts"], r)
    return out


def frame(res):
    return res.rows.drop(columns="seconds").reset_index(drop=True)


def run_on_ray(factory, items, store, **kw):
    "A pool for one run: started, run, shut down (pool options and `RayWorkerPool.run` options in one call)."
    pool_kw = {k: kw.pop(k) for k in ("num_actors", "num_cpus", "num_gpus", "torch_threads", "batched", "max_restarts")
               if k in kw}
    with RayWorkerPool(factory, **pool_kw) as pool:
        return pool.run(items, store, **kw)


@pytest.mark.slow
def test_tiny_sd_images_identical_to_local_executor(tmp_path):
    import torch
    items = [{"prompt": PROMPTS[i % 6], "seed": 10 + i} for i in range(8)]
    st_r = ItemStore(tmp_path / "ray" / "items.sqlite")
    df_r = run_on_ray(generator_factory("tiny-sd"), items, st_r, num_actors=2, torch_threads=1, batch_size=3,
                      progress=False)
    threads = torch.get_num_threads(); torch.set_num_threads(1)
    try:
        st_l = ItemStore(tmp_path / "local" / "items.sqlite")
        df_l = run_items(build_fn(generator_factory("tiny-sd"), st_l), items, st_l, max_workers=1, progress=False)
    finally: torch.set_num_threads(threads)
    assert comparable(st_r) == comparable(st_l)            # image SHA-256s and blob paths included
    pd.testing.assert_frame_equal(frame(df_r), frame(df_l))
    for e in st_r.entries():
        rec = e["record"]
        assert rec["outcome"] == "generated"
        assert st_r.blob_path(rec["image"]).read_bytes() == st_l.blob_path(rec["image"]).read_bytes()
    s = df_r.summary
    assert (s["executor"], s["actors"], s["done"], s["worker_deaths"]) == ("ray", 2, 8, 0)
    assert st_r.counters()["images"] == 8


@pytest.mark.slow
def test_workers_killed_from_outside_are_recovered_exactly_once(tmp_path):
    def factory(blobs):
        sim = build_fn(generator_factory("sim"), blobs)
        def fn(item):
            time.sleep(0.05)  # long enough for the kills to land mid-run
            return sim(item)
        return fn
    n = 80
    items = [{"prompt": PROMPTS[i % 6], "seed": i} for i in range(n)]
    st = ItemStore(tmp_path / "ray" / "items.sqlite")
    pool = RayWorkerPool(factory, num_actors=2, num_cpus=1, max_restarts=3)
    pool.start()
    pids0 = pool.pids()
    out = {}
    t = threading.Thread(target=lambda: out.update(df=pool.run(items, st, batch_size=4, progress=False)))
    t.start()
    watch = ItemStore(st.path)  # a second connection, as another process would read the WAL store

    def wait_done(k, limit=120):
        t0 = time.time()
        while watch.counts()["done"] < k:
            assert time.time() - t0 < limit and t.is_alive(), "run ended or stalled before the kill point"
            time.sleep(0.01)
    try:
        wait_done(12); os.kill(pids0[0], signal.SIGKILL)             # the kernel's OOM killer, say
        wait_done(40); ray.kill(pool.actors[1], no_restart=False)     # Ray kills it; it is restarted
        t.join(240)
        assert not t.is_alive()
        df = out["df"]
        s = df.summary
        assert (s["done"], s["failed"], s["cached"]) == (n, 0, 0)
        assert s["worker_deaths"] == 2 and s["resubmitted_items"] >= 2
        entries = st.entries()
        assert len(entries) == n and {e["status"] for e in entries} == {"done"}
        assert {e["attempts"] for e in entries} == {1}               # each key written exactly once
        # the same spec on the local executor gives the same records
        st_l = ItemStore(tmp_path / "local" / "items.sqlite")
        df_l = run_items(build_fn(factory, st_l), items, st_l, max_workers=2, progress=False)
        assert comparable(st) == comparable(st_l)
        pd.testing.assert_frame_equal(frame(df), frame(df_l))
        pids1 = pool.pids()
        assert pids1[0] != pids0[0] and pids1[1] != pids0[1]         # both restarted, models reloaded
    finally:
        pool.shutdown()


@pytest.mark.slow
def test_poison_item_is_stored_as_worker_lost_and_spares_its_neighbours(tmp_path):
    def factory():
        def fn(item):
            if item["x"] == 4: os.kill(os.getpid(), signal.SIGKILL)  # crashes its worker every time
            return {"outcome": "ok", "x": item["x"]}
        return fn
    items = [{"x": i} for i in range(9)]
    st = ItemStore(tmp_path / "items.sqlite")
    df = run_on_ray(factory, items, st, num_actors=1, batch_size=3, max_worker_deaths=2, max_restarts=4,
                    progress=False)
    s = df.summary
    assert (s["done"], s["failed"], s["worker_lost"], s["worker_deaths"]) == (8, 1, 1, 2), (s["deaths"], st.entries())
    bad = st.get(item_key({"x": 4}))
    assert (bad["status"], bad["outcome"], bad["error_kind"], bad["attempts"]) == ("failed", "failed", "worker_lost", 2)
    assert "died 2 times" in bad["error"]
    assert {e["attempts"] for e in st.entries(status="done")} == {1}
    assert st.counters()["worker_lost"] == 1 and st.counters().get("refused", 0) == 0


def test_retries_and_failures_inside_workers_match_local_executor(tmp_path):
    def factory():
        seen = set()  # per worker process: an item goes to one worker, so its first call fails there
        def fn(item):
            if item["kind"] == "flaky" and item["i"] not in seen:
                seen.add(item["i"]); raise TransientError("429 Too Many Requests", retry_after=0.0, status=429)
            if item["kind"] == "down": raise TransientError("503 Service Unavailable", status=503)
            if item["kind"] == "bad": raise FinalError("400 invalid prompt", status=400)
            if item["kind"] == "bug": raise KeyError("missing field")
            outcome = "refused_policy" if item["kind"] == "refuse" else "generated"
            return {"outcome": outcome, "i": item["i"], "usage": {"tokens": 3}}
        return fn
    kinds = ["ok", "flaky", "down", "bad", "bug", "refuse"]
    items = [{"kind": kinds[i % 6], "i": i} for i in range(18)]
    st_r, st_l = ItemStore(tmp_path / "r.sqlite"), ItemStore(tmp_path / "l.sqlite")
    pool = RayWorkerPool(factory, num_actors=2)   # kept for the retry_failed pass: workers serve several runs
    df_r = pool.run(items, st_r, batch_size=4, retry=FAST, progress=False)
    df_l = run_items(build_fn(factory), items, st_l, max_workers=2, retry=FAST, progress=False)
    pd.testing.assert_frame_equal(frame(df_r), frame(df_l))
    assert comparable(st_r) == comparable(st_l)
    assert st_r.counters() == st_l.counters()
    kinds_of = df_r.rows.assign(kind=[it["kind"] for it in items]).groupby("kind")
    assert kinds_of.attempts.max().to_dict() == {"bad": 1, "bug": 1, "down": 4, "flaky": 2, "ok": 1, "refuse": 1}
    assert set(df_r.rows.loc[df_r.rows.status == "failed", "error_kind"]) == {"final", "transient_exhausted"}
    assert df_r.summary["refused"] == 3 and df_r.summary["retries"] == 3 * 1 + 3 * 3
    # retry_failed re-attempts only the failures, on either executor
    try: df2 = pool.run(items, st_r, retry=FAST, retry_failed=True, progress=False)
    finally: pool.shutdown()
    assert df2.summary["called"] == 9 and df2.rows.cached.sum() == 9
    assert st_r.counters()["calls"] == st_l.counters()["calls"] + 9 + 3 * 3   # down items retried 4 times again


def test_resume_across_executors(tmp_path):
    def factory(blobs):
        return build_fn(generator_factory("sim"), blobs)
    items = [{"prompt": PROMPTS[i % 6], "seed": i} for i in range(20)]
    key = lambda it: item_key("test.t2i", prompt=it["prompt"], seed=it["seed"])
    st = ItemStore(tmp_path / "mixed" / "items.sqlite")
    run_items(build_fn(factory, st), items[:8], st, key=key, progress=False)              # local, then interrupted
    df = run_on_ray(factory, items, st, key=key, num_actors=2, progress=False)             # Ray resumes
    assert (df.rows.cached.sum(), df.summary["called"]) == (8, 12)
    df2 = run_items(build_fn(factory, st), items, st, key=key, progress=False)           # local sees it all done
    assert df2.rows.cached.all() and df2.summary["calls"] == 0
    st1 = ItemStore(tmp_path / "oneshot" / "items.sqlite")
    run_items(build_fn(factory, st1), items, st1, key=key, progress=False)
    assert comparable(st) == comparable(st1)
    # a fully cached Ray re-run starts no worker
    t0 = time.monotonic()
    df3 = run_on_ray(factory, items, st, key=key, num_actors=2, progress=False)
    assert df3.rows.cached.all() and df3.summary["actors"] == 0 and time.monotonic() - t0 < 2


def test_batched_work_function(tmp_path):
    def factory():
        state = {"oom": True, "flaky": True}
        def fn(batch):
            if state["oom"] and any(it["x"] == 5 for it in batch):   # the whole call fails once: items retried alone
                state["oom"] = False; raise RuntimeError("CUDA out of memory (simulated)")
            out = []
            for it in batch:
                if it["x"] == 2 and state["flaky"]: state["flaky"] = False; out.append(TransientError("flaky item"))
                elif it["x"] == 7: out.append(ValueError("bad item"))
                else: out.append({"outcome": "ok", "x": it["x"]})
            return out
        return fn
    items = [{"x": i} for i in range(9)]
    st = ItemStore(tmp_path / "items.sqlite")
    df = run_on_ray(factory, items, st, num_actors=1, batch_size=3, batched=True, retry=FAST, progress=False)
    by_x = {e["record"]["x"] if e["record"] else None: e for e in st.entries()}
    assert sorted(k for k in by_x if k is not None) == [0, 1, 2, 3, 4, 5, 6, 8]
    assert st.get(item_key({"x": 7}))["error_kind"] == "final"
    assert st.get(item_key({"x": 2}))["attempts"] == 2                 # its element error was retried alone
    assert df.summary["done"] == 8 and df.summary["failed"] == 1


def test_factory_error_stops_the_run_with_its_traceback(tmp_path):
    def factory():
        raise OSError("weights for 'flux' are not in the Hugging Face cache")
    st = ItemStore(tmp_path / "items.sqlite")
    with pytest.raises(RuntimeError, match="could not build its work function") as ei:
        run_on_ray(factory, [{"x": 1}], st, num_actors=1, progress=False)
    assert "not in the Hugging Face cache" in str(ei.value) and "build_fn" in str(ei.value)
    assert len(st) == 0
