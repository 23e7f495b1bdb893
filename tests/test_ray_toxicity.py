"""Zero-shot toxicity scoring and Integrated Gradients on the Ray executor (`execution="ray"`), on a local 2-CPU Ray:
same keys, records and scores as the local executor (one torch thread on both sides), a worker killed mid-run, a
driver that stopped between a batch's rows and the batch's record, a store left by an earlier version (rows inside
Ray batch records), and resuming across executors.

The model is the tiny random-weight GPT-2 given by its registry name ("tiny-gpt2"), so each worker loads its own copy.
The worker-kill and Integrated Gradients cases are marked `slow` (about 25-30 s each here).
"""
import json, os, signal
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

import acrb_nb.toxicity.zeroshot as zs
from acrb_nb.store import ItemStore
from acrb_nb.execution import Execution
from acrb_nb.toxicity.zeroshot import score_dataset
from acrb_nb.toxicity.explain import explain_rows
from acrb_nb.toxicity.options import ScoreOptions, IGOptions
from cluster_driver import TEXTS  # 24 short texts of varied lengths, also scored on the two-node cluster

pytestmark = [pytest.mark.usefixtures("local_ray"), pytest.mark.timeout(300)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
RAY2 = Execution("ray", num_actors=2, torch_threads=1)
RAY1 = Execution("ray", num_actors=1, torch_threads=1)  # resumes: one worker is enough to ask the model's fingerprint
B4 = ScoreOptions(batch_size=4)
B4_NOCC = ScoreOptions(batch_size=4, contextual=False)  # the data rows only (no content-free rows)
B2_NOCC = ScoreOptions(batch_size=2, contextual=False)
IG8 = IGOptions(n_steps=8)



@pytest.fixture
def one_thread():
    "Local torch on one thread, as the Ray workers (CPU reductions depend on the thread count)."
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def entries(d):
    "key -> (status, attempts, record) of a run folder's store."
    return {e["key"]: (e["status"], e["attempts"], e["record"]) for e in ItemStore(Path(d) / "items.sqlite").entries()}


def rows(d):
    return {k: v for k, v in entries(d).items() if v[2]["kind"] == "zs_row"}


def test_score_dataset_on_ray_equals_local_executor(tmp_path, one_thread):
    df = pd.DataFrame({"text": TEXTS, "label": [i % 2 for i in range(len(TEXTS))]})
    loc = score_dataset(df, "tiny-gpt2", label_col="label", score_options=B4, run=tmp_path / "local")
    ry = score_dataset(df, "tiny-gpt2", label_col="label", score_options=B4, run=tmp_path / "ray", execution=RAY2)
    s = ry.summary
    assert (s["executor"], s["batches"], s["worker_deaths"]) == ("ray", 6, 0) and loc.summary["executor"] == "local"
    assert ry.model_info == loc.model_info
    assert ry.rows["score"].tolist() == loc.rows["score"].tolist()             # bit-identical
    assert ry.summary["content_free_score"] == loc.summary["content_free_score"]
    pd.testing.assert_frame_equal(ry.rows, loc.rows)
    el, er = entries(tmp_path / "local"), entries(tmp_path / "ray")
    assert set(el) == set(er)                                                  # same row and batch keys
    assert rows(tmp_path / "ray") == rows(tmp_path / "local") and len(rows(tmp_path / "ray")) == 24 + 3
    assert {a for _, a, _ in er.values()} == {1}
    assert ItemStore(tmp_path / "ray" / "items.sqlite").counters() == ItemStore(tmp_path / "local" / "items.sqlite").counters()
    # a dict works as well as an Execution; the Ray store is complete for the local executor and vice versa
    assert score_dataset(df, "tiny-gpt2", score_options=B4, run=tmp_path / "ray").summary["cached"] == 24
    again = score_dataset(df, "tiny-gpt2", score_options=B4_NOCC, run=tmp_path / "local",
                          execution={"executor": "ray", "num_actors": 1, "torch_threads": 1})
    assert again.summary["cached"] == 24 and "batches" not in again.summary
    # a store the local executor filled half-way is finished on Ray: no finished row is scored again (every key written
    # once), the rows Ray adds agree with the one-run scores (other batches, other padding: float-level differences)
    score_dataset(df, "tiny-gpt2", max_rows=10, score_options=B4_NOCC, run=tmp_path / "mix")
    mix = score_dataset(df, "tiny-gpt2", score_options=B4_NOCC, run=tmp_path / "mix", execution=RAY1)
    assert (mix.summary["cached"], mix.summary["executor"]) == (10, "ray") and mix.summary["batches"] >= 4
    assert {a for _, a, _ in entries(tmp_path / "mix").values()} == {1} and len(rows(tmp_path / "mix")) == 24
    pd.testing.assert_series_equal(mix.rows["score"], loc.rows["score"], atol=1e-4, rtol=0)
    assert score_dataset(df, "tiny-gpt2", score_options=B4_NOCC, run=tmp_path / "mix").summary["cached"] == 24


@pytest.mark.slow
def test_worker_killed_mid_run_every_row_scored_once(tmp_path, monkeypatch, one_thread):
    orig, marker = zs._zs_work, tmp_path / "killed-once"

    def killing_worker(lm, blobs, **kw):  # `_zs_work`'s arguments
        "The real work function; the first worker to reach its 2nd batch SIGKILLs itself (as the OOM killer would), once."
        work = orig(lm, blobs, **kw)
        n = {"calls": 0}
        def fn(item):
            n["calls"] += 1
            if n["calls"] == 2 and not marker.exists():
                marker.touch(); os.kill(os.getpid(), signal.SIGKILL)
            return work(item)
        fn.backend = work.backend
        return fn

    monkeypatch.setattr(zs, "_zs_work", killing_worker)  # shipped to the workers by value (defined in this test)
    ry = score_dataset(TEXTS, "tiny-gpt2", score_options=B2_NOCC, run=tmp_path / "ray",
                       execution=Execution("ray", num_actors=2, torch_threads=1, batch_size=2))
    monkeypatch.undo()
    s = ry.summary
    assert marker.exists() and s["worker_deaths"] == 1 and s["resubmitted_items"] >= 1, s
    assert s["failed_batches"] == 0 and ry.rows["scored"].all() and ry.rows["score"].notna().all()
    e = entries(tmp_path / "ray")
    assert len(rows(tmp_path / "ray")) == 24 and len(e) == 24 + 12              # 24 rows + 12 batches of 2
    assert {(st, a) for st, a, _ in e.values()} == {("done", 1)}               # every key written exactly once
    loc = score_dataset(TEXTS, "tiny-gpt2", score_options=B2_NOCC, run=tmp_path / "local")
    assert ry.rows["score"].tolist() == loc.rows["score"].tolist()
    assert rows(tmp_path / "ray") == rows(tmp_path / "local")


def test_driver_stopped_between_a_batchs_rows_and_its_record_resumes(tmp_path, monkeypatch, one_thread):
    "The driver writes a Ray batch's rows, then its record: stopped in between, it loses nothing that was written."
    from acrb_nb.runner import RunLedger
    d = tmp_path / "run"
    def stop(self, i, res): raise KeyboardInterrupt("the driver stopped after writing a batch's rows")
    monkeypatch.setattr(RunLedger, "commit", stop)
    with pytest.raises(KeyboardInterrupt):
        score_dataset(TEXTS[:8], "tiny-gpt2", score_options=B4_NOCC, run=d, execution=RAY2)
    monkeypatch.undo()
    first = entries(d)
    assert len(first) == 4 and len(rows(d)) == 4                               # one batch's rows, no batch record
    loc = score_dataset(TEXTS[:8], "tiny-gpt2", score_options=B4_NOCC, run=d)   # the local executor resumes
    assert (loc.summary["cached"], loc.summary["batches"]) == (4, 1)           # only the other batch is scored
    assert len(rows(d)) == 8 and {a for _, a, _ in entries(d).values()} == {1}
    assert {k: v for k, v in entries(d).items() if k in first} == first        # the rows written first are kept as they were
    ref = score_dataset(TEXTS[:8], "tiny-gpt2", score_options=B4_NOCC, run=tmp_path / "ref")
    assert loc.rows["score"].tolist() == ref.rows["score"].tolist()


def test_store_of_an_earlier_version_with_rows_inside_ray_batches_resumes_without_scoring(tmp_path, one_thread):
    """Earlier versions stored a Ray batch's rows inside the batch record and wrote them out after the run: a driver
    killed in between left batch records whose rows the store lacks. The next run, on either executor, writes them
    (`expand_batch_rows`) and scores nothing again."""
    ref = score_dataset(TEXTS[:8], "tiny-gpt2", score_options=B4_NOCC, run=tmp_path / "ref")
    row_recs = [[k, rec] for k, (_, _, rec) in rows(tmp_path / "ref").items()]
    d = tmp_path / "old"
    old = ItemStore(d / "items.sqlite")                                        # what such a killed run left behind
    bk = zs._batch_key({"keys": [k for k, _ in row_recs]})
    old.put(bk, {**zs._batch_record([{}] * len(row_recs)), "rows": row_recs})
    old.set_meta(zs._PENDING, json.dumps([bk]))
    assert len(rows(d)) == 0 and len(entries(d)) == 1
    loc = score_dataset(TEXTS[:8], "tiny-gpt2", score_options=B4_NOCC, run=d)
    assert loc.summary["cached"] == 8 and "batches" not in loc.summary
    assert len(rows(d)) == 8 and {a for _, a, _ in entries(d).values()} == {1}
    assert loc.rows["score"].tolist() == ref.rows["score"].tolist()
    assert ItemStore(d / "items.sqlite").get_meta(zs._PENDING) == "[]"


@pytest.mark.slow
def test_explain_rows_on_ray_equals_local_executor(tmp_path, one_thread):
    df = pd.DataFrame({"text": TEXTS[:5]})
    ig_l = explain_rows(df, "tiny-gpt2", rows=None, ig_options=IG8, run=tmp_path / "local")
    ig_r = explain_rows(df, "tiny-gpt2", rows=None, ig_options=IG8, run=tmp_path / "ray", execution=RAY2)
    assert ig_r.summary["executor"] == "ray" and ig_r.model_info == ig_l.model_info
    pd.testing.assert_frame_equal(ig_r.rows, ig_l.rows)
    assert entries(tmp_path / "ray").keys() == entries(tmp_path / "local").keys()
    # resumed on the other executor: nothing is explained again
    again = explain_rows(df, "tiny-gpt2", rows=None, ig_options=IG8, run=tmp_path / "local", execution=RAY1)
    assert (again.summary["cached"], again.summary["called"]) == (5, 0)
    # the local executor explains 2 rows, Ray the other 3 into the same store: each row once, the same attributions
    explain_rows(df, "tiny-gpt2", rows=2, ig_options=IG8, run=tmp_path / "mix")
    mix = explain_rows(df, "tiny-gpt2", rows=None, ig_options=IG8, run=tmp_path / "mix", execution=RAY1)
    assert (mix.summary["cached"], mix.summary["called"]) == (2, 3)
    assert {a for _, a, _ in entries(tmp_path / "mix").values()} == {1}
    assert mix.rows["attributions"].map(list).tolist() == ig_l.rows["attributions"].map(list).tolist()
