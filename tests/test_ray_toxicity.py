"""Zero-shot toxicity scoring and Integrated Gradients on the Ray executor (`execution="ray"`), on a local 2-CPU Ray:
same keys, records and scores as the local executor (one torch thread on both sides), a worker killed mid-run, a
driver that stopped between a Ray batch and its rows, and resuming across executors.

The model is the tiny random-weight GPT-2 given by its registry name ("tiny-gpt2"), so each worker loads its own copy.
The worker-kill and Integrated Gradients cases are marked `slow` (about 25-30 s each here).
"""
import os, signal
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

import acrb_nb.toxicity.zeroshot as zs
from acrb_nb.store import ItemStore
from acrb_nb.ray_exec import ray_init, Execution
from acrb_nb.toxicity.zeroshot import score_dataset
from acrb_nb.toxicity.explain import explain_rows

pytestmark = [pytest.mark.usefixtures("local_ray"), pytest.mark.timeout(300)]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
RAY2 = Execution("ray", num_actors=2, torch_threads=1)
RAY1 = Execution("ray", num_actors=1, torch_threads=1)  # resumes: one worker is enough to ask the model's fingerprint
WORDS = ["you are", "I hate", "women are", "my muslim neighbours", "black people", "have a nice day", "gay people",
         "the jewish festival", "shut up", "thanks for", "the quick brown fox", "immigrants"]
TEXTS = [f"{w} {' '.join(['very'] * (i % 5))} {i}" for i, w in enumerate(WORDS * 2)]  # 24 texts of varied lengths



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
    loc = score_dataset(df, "tiny-gpt2", label_col="label", batch_size=4, run=tmp_path / "local")
    ry = score_dataset(df, "tiny-gpt2", label_col="label", batch_size=4, run=tmp_path / "ray", execution=RAY2)
    s = ry.attrs["run"]
    assert (s["executor"], s["batches"], s["worker_deaths"]) == ("ray", 6, 0) and loc.attrs["run"]["executor"] == "local"
    assert ry.attrs["fingerprint"] == loc.attrs["fingerprint"]
    assert ry["score"].tolist() == loc["score"].tolist()                       # bit-identical
    assert ry.attrs["content_free_score"] == loc.attrs["content_free_score"]
    pd.testing.assert_frame_equal(ry, loc)
    el, er = entries(tmp_path / "local"), entries(tmp_path / "ray")
    assert set(el) == set(er)                                                  # same row and batch keys
    assert rows(tmp_path / "ray") == rows(tmp_path / "local") and len(rows(tmp_path / "ray")) == 24 + 3
    assert {a for _, a, _ in er.values()} == {1}
    assert ItemStore(tmp_path / "ray" / "items.sqlite").counters() == ItemStore(tmp_path / "local" / "items.sqlite").counters()
    # a dict works as well as an Execution; the Ray store is complete for the local executor and vice versa
    assert score_dataset(df, "tiny-gpt2", batch_size=4, run=tmp_path / "ray").attrs["run"]["cached"] == 24
    again = score_dataset(df, "tiny-gpt2", batch_size=4, run=tmp_path / "local", contextual=False,
                          execution={"executor": "ray", "num_actors": 1})
    assert again.attrs["run"]["cached"] == 24 and "batches" not in again.attrs["run"]
    # a store the local executor filled half-way is finished on Ray: no finished row is scored again (every key written
    # once), the rows Ray adds agree with the one-run scores (other batches, other padding: float-level differences)
    score_dataset(df, "tiny-gpt2", max_rows=10, batch_size=4, run=tmp_path / "mix", contextual=False)
    mix = score_dataset(df, "tiny-gpt2", batch_size=4, run=tmp_path / "mix", contextual=False, execution=RAY1)
    assert (mix.attrs["run"]["cached"], mix.attrs["run"]["executor"]) == (10, "ray") and mix.attrs["run"]["batches"] >= 4
    assert {a for _, a, _ in entries(tmp_path / "mix").values()} == {1} and len(rows(tmp_path / "mix")) == 24
    pd.testing.assert_series_equal(mix["score"], loc["score"], atol=1e-4, rtol=0)
    assert score_dataset(df, "tiny-gpt2", batch_size=4, run=tmp_path / "mix", contextual=False).attrs["run"]["cached"] == 24


@pytest.mark.slow
def test_worker_killed_mid_run_every_row_scored_once(tmp_path, monkeypatch, one_thread):
    orig, marker = zs._zs_worker, tmp_path / "killed-once"

    def killing_worker(model, model_kw, task, chat, max_text_tokens, method, share_prefix):  # `_zs_worker`'s arguments
        "The real factory; the first worker to reach its 2nd batch SIGKILLs itself (as the OOM killer would), once."
        work = orig(model, model_kw, task, chat, max_text_tokens, method, share_prefix)
        n = {"calls": 0}
        def fn(item):
            n["calls"] += 1
            if n["calls"] == 2 and not marker.exists():
                marker.touch(); os.kill(os.getpid(), signal.SIGKILL)
            return work(item)
        fn.backend = work.backend
        return fn

    monkeypatch.setattr(zs, "_zs_worker", killing_worker)  # shipped to the workers by value (defined in this test)
    ry = score_dataset(TEXTS, "tiny-gpt2", batch_size=2, contextual=False, run=tmp_path / "ray",
                       execution=Execution("ray", num_actors=2, torch_threads=1, batch_size=2))
    monkeypatch.undo()
    s = ry.attrs["run"]
    assert marker.exists() and s["worker_deaths"] == 1 and s["resubmitted_items"] >= 1, s
    assert s["failed_batches"] == 0 and ry["scored"].all() and ry["score"].notna().all()
    e = entries(tmp_path / "ray")
    assert len(rows(tmp_path / "ray")) == 24 and len(e) == 24 + 12              # 24 rows + 12 batches of 2
    assert {(st, a) for st, a, _ in e.values()} == {("done", 1)}               # every key written exactly once
    loc = score_dataset(TEXTS, "tiny-gpt2", batch_size=2, contextual=False, run=tmp_path / "local")
    assert ry["score"].tolist() == loc["score"].tolist()
    assert rows(tmp_path / "ray") == rows(tmp_path / "local")


def test_rows_of_a_batch_stored_before_a_driver_crash_are_written_on_resume(tmp_path, monkeypatch, one_thread):
    d = tmp_path / "run"
    monkeypatch.setattr(zs, "expand_batch_rows", lambda store, batch_keys=None: 0)  # the driver dies before writing rows
    first = score_dataset(TEXTS[:8], "tiny-gpt2", batch_size=4, contextual=False, run=d, execution=RAY2)
    monkeypatch.undo()
    assert first["score"].isna().all() and len(rows(d)) == 0 and len(entries(d)) == 2   # 2 batch records, rows inside
    # the local executor resumes: it writes the rows the batch records carry and scores nothing again
    loc = score_dataset(TEXTS[:8], "tiny-gpt2", batch_size=4, contextual=False, run=d)
    assert loc.attrs["run"]["cached"] == 8 and "batches" not in loc.attrs["run"]
    assert len(rows(d)) == 8 and {a for _, a, _ in entries(d).values()} == {1}
    ref = score_dataset(TEXTS[:8], "tiny-gpt2", batch_size=4, contextual=False, run=tmp_path / "ref")
    assert loc["score"].tolist() == ref["score"].tolist()
    assert ItemStore(d / "items.sqlite").get_meta(zs._PENDING) == "[]"


@pytest.mark.slow
def test_explain_rows_on_ray_equals_local_executor(tmp_path, one_thread):
    df = pd.DataFrame({"text": TEXTS[:5]})
    ig_l = explain_rows(df, "tiny-gpt2", rows=None, n_steps=8, run=tmp_path / "local")
    ig_r = explain_rows(df, "tiny-gpt2", rows=None, n_steps=8, run=tmp_path / "ray", execution=RAY2)
    assert ig_r.attrs["executor"] == "ray" and ig_r.attrs["fingerprint"] == ig_l.attrs["fingerprint"]
    pd.testing.assert_frame_equal(ig_r, ig_l)
    assert entries(tmp_path / "ray").keys() == entries(tmp_path / "local").keys()
    # resumed on the other executor: nothing is explained again
    again = explain_rows(df, "tiny-gpt2", rows=None, n_steps=8, run=tmp_path / "local", execution=RAY1)
    assert (again.attrs["run"]["cached"], again.attrs["run"]["called"]) == (5, 0)
    # the local executor explains 2 rows, Ray the other 3 into the same store: each row once, the same attributions
    explain_rows(df, "tiny-gpt2", rows=2, n_steps=8, run=tmp_path / "mix")
    mix = explain_rows(df, "tiny-gpt2", rows=None, n_steps=8, run=tmp_path / "mix", execution=RAY1)
    assert (mix.attrs["run"]["cached"], mix.attrs["run"]["called"]) == (2, 3)
    assert {a for _, a, _ in entries(tmp_path / "mix").values()} == {1}
    assert mix["attributions"].map(list).tolist() == ig_l["attributions"].map(list).tolist()
