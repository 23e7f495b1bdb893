"""Kill and resume, per study pipeline: a run in a child process is SIGKILLed at seeded points (three per pipeline),
then re-run to completion. Promises checked against an uninterrupted reference run of the same spec:

- 0 items lost (every reference key done, none failed) and 0 duplicated (one stored entry and one output row per key);
- 0 repeated calls for items finished before a kill, counted in the fake server's JSONL log (API pipelines) or in the
  store's per-item attempt counts (simulator);
- final metrics identical (metrics JSON without timestamps, sorted keys; stored records without latencies).

API pipelines reach the local servers the way a user's run reaches the real ones: the SDKs' own environment variables
`OPENAI_BASE_URL` and `GOOGLE_GEMINI_BASE_URL` (no code path exists only for tests).
"""
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from acrb_nb.testing import start_server_process, stop_server_process, read_log
from reliability_helpers import (DUMMY_ENV, ROOT, ForkServer, done_count, kill_at, kill_points, metrics_json, pixel_sha,
                                 read_jsonl, server_env, store_snapshot)

AREA = "kill-resume"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
N_KILLS = 3


@pytest.fixture(scope="module")
def forks(tmp_path_factory):
    "One fork server for the module's pipeline runs (see reliability_helpers.ForkServer)."
    with ForkServer(["acrb_nb.acrb.pipeline", "acrb_nb.toxicity.zeroshot", "acrb_nb.iat", "acrb_nb.adapters.images",
                     "acrb_nb.adapters.text", "acrb_nb.adapters.vision", "acrb_nb.adapters.sim", "openai", "google.genai"],
                    tmp_path_factory.mktemp("forks")) as fs:
        yield fs


def _attempts(db):
    import sqlite3
    con = sqlite3.connect(str(db))
    try: return dict(con.execute("SELECT key, attempts FROM items"))
    finally: con.close()


def _check_store(ref_db, db, reliability, name, kills, identical_metrics, repeated, only=None, record=True, rows=None,
                 n_rows=None):
    """Lost / duplicated / identical records (those for which `only(record)` holds); records the figures.

    `rows`: the ids of the final output table's rows (one per item); duplicated = rows beyond one per id, plus rows
    beyond the uninterrupted run's `n_rows`."""
    ref, got = store_snapshot(ref_db), store_snapshot(db)
    if only is not None:
        ref, got = ({k: v for k, v in d.items() if v[2] is not None and only(v[2])} for d in (ref, got))
    lost = len(set(ref) - {k for k, v in got.items() if v[0] == "done"})
    extra = len(set(got) - set(ref))
    assert lost == 0, f"{lost} items of the reference run are missing or failed after resume"
    assert extra == 0, f"{extra} items exist only in the resumed run (keys not reproducible?)"
    dup = 0 if rows is None else (len(rows) - len(set(rows))) + max(0, len(rows) - n_rows)
    assert dup == 0, f"{dup} duplicated rows in the final output"
    assert rows is None or len(set(rows)) == n_rows
    diff = [k for k in ref if ref[k] != got[k]]
    assert not diff, f"{len(diff)} stored records differ from the uninterrupted run, e.g. {ref[diff[0]]} vs {got[diff[0]]}"
    if record: reliability.add(AREA, pipelines={name}, kills=kills, lost=lost, duplicated=dup, repeated_calls=repeated,
                               identical=int(identical_metrics), compared=1)
    return ref


def _answered(log, start):
    """Prompts of the calls logged from `start` on. Every call was answered (no faults are scripted here), except that a
    client killed in the middle of sending a request leaves a truncated body, which the server logs as a 400 'error'."""
    recs = read_log(log)
    bad = Counter((c["action"], c["status"]) for c in recs if c["action"] != "ok")
    assert set(bad) <= {("error", 400)} and sum(bad.values()) <= 4 * N_KILLS, bad  # at most the workers in flight per kill
    return [c["prompt"] if c["action"] == "ok" else None for c in recs[start:]]


def _windows(log_len_at_kill, finished_at_kill, calls, start):
    "Calls (item ids, in log order from `start`) made after each kill for items finished before it."
    rep = []
    for n, fin in zip(log_len_at_kill, finished_at_kill):
        rep += [c for c in calls[n - start:] if c in fin]
    return rep


# ------------------------------------------------------------------------------------------------------------------
def test_acrb_t2i_sim(run_tmp, forks, reliability):
    "Simulator (no server): stage II generations and stage III judge calls, killed anywhere in either stage."
    from acrb_nb.acrb.pipeline import run_acrb
    kw = dict(model="sim", mode="t2i", n_base_prompts=9, seed=7, analysis={"n_boot": 200})
    ref = run_acrb(**kw, run_dir=str(run_tmp / "ref"))
    total = done_count([ref.run.dir / "items.sqlite"])
    run = run_tmp / "killed"
    db = run / "items.sqlite"
    pts = kill_points(("acrb-t2i-sim",), total, N_KILLS)
    seen = kill_at(forks, "acrb_nb.acrb.pipeline:run_acrb", {**kw, "run_dir": str(run)}, {}, [db], pts)
    assert seen[-1] < total
    forks.run("acrb_nb.acrb.pipeline:run_acrb", {**kw, "run_dir": str(run)}, {})
    # a finished item is never computed again: its attempts stay 1 (a second put of the key would add to them)
    att = _attempts(db)
    repeated = sum(a - 1 for a in att.values())
    assert repeated == 0, f"{repeated} finished items were computed again after a kill"
    same = metrics_json(ref.run.dir / "acrb_summary.json") == metrics_json(run / "acrb_summary.json")
    assert same, "acrb_summary.json differs from the uninterrupted run"
    assert (ref.run.dir / "stage1_prompts.json").read_bytes() == (run / "stage1_prompts.json").read_bytes()
    s3_ref, s3 = pd.read_parquet(ref.run.dir / "stage3_evaluation.parquet"), pd.read_parquet(run / "stage3_evaluation.parquet")
    assert s3.key.is_unique and len(s3) == len(s3_ref)
    pd.testing.assert_frame_equal(s3_ref, s3)
    man = json.loads((run / "manifest.json").read_text())
    assert len(man["sessions"]) == N_KILLS + 1 and man["sessions"][-1]["status"] == "finished"
    _check_store(ref.run.dir / "items.sqlite", db, reliability, "acrb-t2i-sim", N_KILLS, same, repeated,
                 rows=s3.key.tolist(), n_rows=len(s3_ref))


def test_acrb_t2i_openai_server(run_tmp, forks, reliability, monkeypatch):
    "gpt-image-1 against a FakeOpenAI process; every image request is counted in the server's log."
    from acrb_nb.acrb.pipeline import run_acrb
    log = run_tmp / "openai.jsonl"
    proc, url = start_server_process("openai", log_path=log, latency=0.03, image_size=(64, 64),
                                     hooks="reliability_helpers:hooks", env=server_env())
    try:
        for k, v in {**DUMMY_ENV, "OPENAI_BASE_URL": url}.items(): monkeypatch.setenv(k, v)
        kw = dict(model="gpt-image-1", mode="t2i", attributes=["culture", "gender"], n_base_prompts=9, judge="clip:sim",
                  seed=3, analysis={"n_boot": 200})
        ref = run_acrb(**kw, run_dir=str(run_tmp / "ref"))
        n_ref = len(read_log(log))
        ref_prompts = [c["prompt"] for c in read_log(log)]
        assert len(set(ref_prompts)) == len(ref_prompts) == len(ref.stage3), "each T2I item must have its own prompt"
        run = run_tmp / "killed"
        db = run / "items.sqlite"
        log_at_kill, finished_at_kill = [], []
        def snap(i):
            log_at_kill.append(len(read_log(log)))
            finished_at_kill.append({r["text"] for k, (s, o, r) in store_snapshot(db).items() if s == "done" and r.get("stage") == "stage2"})
        env = {"OPENAI_BASE_URL": url}
        pts = kill_points(("acrb-t2i-openai",), done_count([ref.run.dir / "items.sqlite"]), N_KILLS)
        kill_at(forks, "acrb_nb.acrb.pipeline:run_acrb", {**kw, "run_dir": str(run)}, env, [db], pts, on_kill=snap)
        forks.run("acrb_nb.acrb.pipeline:run_acrb", {**kw, "run_dir": str(run)}, env)
    finally:
        stop_server_process(proc)
    calls = _answered(log, n_ref)
    repeated = _windows(log_at_kill, finished_at_kill, calls, n_ref)
    assert not repeated, f"{len(repeated)} calls for items finished before a kill, e.g. {repeated[:3]}"
    per = Counter(c for c in calls if c is not None)
    assert set(per) == set(ref_prompts), "some items never reached the server"
    in_flight = sum(v - 1 for v in per.values())  # answered while the client died, before they were stored
    assert in_flight <= 4 * N_KILLS
    same = metrics_json(ref.run.dir / "acrb_summary.json") == metrics_json(run / "acrb_summary.json")
    assert same, "acrb_summary.json differs from the uninterrupted run"
    s3 = pd.read_parquet(run / "stage3_evaluation.parquet")
    assert s3.key.is_unique and len(s3) == len(ref.stage3)
    _check_store(ref.run.dir / "items.sqlite", db, reliability, "acrb-t2i-gpt-image-1", N_KILLS, same, len(repeated),
                 rows=s3.key.tolist(), n_rows=len(ref.stage3))


def test_acrb_i2i_gemini_server(run_tmp, forks, reliability, monkeypatch):
    "Gemini image editing against a FakeGemini process; calls are identified by (instruction, input image pixels)."
    from acrb_nb.acrb.pipeline import run_acrb
    from acrb_nb.acrb.sources import DEFAULT_SOURCES  # the default I2I sources: the shipped photographs of people
    from acrb_nb.adapters.base import load_image
    log, side = run_tmp / "gemini.jsonl", run_tmp / "renders.jsonl"
    proc, url = start_server_process("gemini", log_path=log, latency=0.03, image_size=(64, 64),
                                     hooks="reliability_helpers:hooks", env=server_env(RELIABILITY_IMAGE_LOG=str(side)))
    try:
        for k, v in {**DUMMY_ENV, "GOOGLE_GEMINI_BASE_URL": url}.items(): monkeypatch.setenv(k, v)
        kw = dict(model="gemini-2.5-flash-image", mode="i2i", n_base_prompts=3, judge="clip:sim", seed=5,
                  analysis={"n_boot": 200})
        ref = run_acrb(**kw, run_dir=str(run_tmp / "ref"))
        n_ref, s_ref = len(read_log(log)), len(read_jsonl(side))
        ref_ids = [(r["prompt"], r["input"]) for r in read_jsonl(side)]
        assert len(set(ref_ids)) == len(ref_ids) == len(ref.stage3) == n_ref
        from acrb_nb.core import file_sha256
        from acrb_nb.acrb.sources import image_files, read_source
        pix = {file_sha256(p): pixel_sha(read_source(p)[0])  # source file sha256 -> pixel sha (what the server sees)
               for p in image_files(DEFAULT_SOURCES)}
        run = run_tmp / "killed"
        db = run / "items.sqlite"
        side_at_kill, finished_at_kill = [], []
        def snap(i):
            side_at_kill.append(len(read_jsonl(side)))
            finished_at_kill.append({(r["text"], pix[r["source_sha256"]]) for k, (s, o, r) in store_snapshot(db).items()
                                     if s == "done" and r.get("stage") == "stage2"})
        env = {"GOOGLE_GEMINI_BASE_URL": url}
        pts = kill_points(("acrb-i2i-gemini",), done_count([ref.run.dir / "items.sqlite"]), N_KILLS)
        kill_at(forks, "acrb_nb.acrb.pipeline:run_acrb", {**kw, "run_dir": str(run)}, env, [db], pts, on_kill=snap)
        forks.run("acrb_nb.acrb.pipeline:run_acrb", {**kw, "run_dir": str(run)}, env)
    finally:
        stop_server_process(proc)
    assert sum(p is not None for p in _answered(log, 0)) == len(read_jsonl(side))  # one render per answered call
    calls = [(r["prompt"], r["input"]) for r in read_jsonl(side)[s_ref:]]
    repeated = _windows(side_at_kill, finished_at_kill, calls, s_ref)
    assert not repeated, f"{len(repeated)} calls for items finished before a kill, e.g. {repeated[:3]}"
    per = Counter(c for c in calls if c is not None)
    assert set(per) == set(ref_ids)
    assert sum(v - 1 for v in per.values()) <= 4 * N_KILLS
    same = metrics_json(ref.run.dir / "acrb_summary.json") == metrics_json(run / "acrb_summary.json")
    assert same, "acrb_summary.json differs from the uninterrupted run"
    s3 = pd.read_parquet(run / "stage3_evaluation.parquet")
    assert s3.key.is_unique and len(s3) == len(ref.stage3)
    _check_store(ref.run.dir / "items.sqlite", db, reliability, "acrb-i2i-gemini-2.5-flash-image", N_KILLS, same,
                 len(repeated), rows=s3.key.tolist(), n_rows=len(ref.stage3))


def test_toxicity_openai_server(run_tmp, forks, reliability, monkeypatch):
    "Zero-shot toxicity scoring (gpt-4o-mini first-token log-probs) against a FakeOpenAI process."
    from acrb_nb.toxicity.zeroshot import score_dataset, get_task
    from acrb_nb.core import item_key, sha256_hex
    rows = json.loads((ROOT / "data" / "toxicity" / "toxigen_200.json").read_text())
    data = run_tmp / "toxigen.parquet"
    pd.DataFrame(rows)[["text", "is_toxic", "target_group"]].to_parquet(data)
    log = run_tmp / "openai.jsonl"
    proc, url = start_server_process("openai", log_path=log, latency=0.03, hooks="reliability_helpers:hooks", env=server_env())
    try:
        for k, v in {**DUMMY_ENV, "OPENAI_BASE_URL": url}.items(): monkeypatch.setenv(k, v)
        kw = dict(data=str(data), model="gpt-4o-mini", label_col="is_toxic", id_cols=["target_group"],
                  score_options={"batch_size": 4}, execution={"progress": False})
        ref = score_dataset(**kw, run=str(run_tmp / "ref"), out=str(run_tmp / "ref" / "preds.parquet"))
        n_ref = len(read_log(log))
        fp = sha256_hex(ref.model_info)
        task = get_task("toxicity")
        texts = pd.read_parquet(data).text.tolist() + ["N/A", "", "[MASK]"]  # the data, then the content-free inputs
        key_of_prompt = {"\n".join(m["content"] for m in task.messages(t)): item_key("toxicity.zeroshot", fp=fp, text=sha256_hex(t))
                         for t in texts}
        ref_prompts = [c["prompt"] for c in read_log(log)]
        assert set(ref_prompts) <= set(key_of_prompt) and len(ref_prompts) == len(set(ref_prompts)) == len(set(texts))
        run = run_tmp / "killed"
        db = run / "items.sqlite"
        log_at_kill, finished_at_kill = [], []
        def snap(i):
            log_at_kill.append(len(read_log(log)))
            finished_at_kill.append({k for k, (s, o, r) in store_snapshot(db).items() if s == "done" and r.get("kind") == "zs_row"})
        env = {"OPENAI_BASE_URL": url}
        ckw = {**kw, "run": str(run), "out": str(run / "preds.parquet")}
        pts = kill_points(("toxicity-openai",), done_count([run_tmp / "ref" / "items.sqlite"]), N_KILLS)
        kill_at(forks, "acrb_nb.toxicity.zeroshot:score_dataset", ckw, env, [db], pts, on_kill=snap)
        forks.run("acrb_nb.toxicity.zeroshot:score_dataset", ckw, env)
    finally:
        stop_server_process(proc)
    calls = [key_of_prompt[p] if p is not None else None for p in _answered(log, n_ref)]
    repeated = _windows(log_at_kill, finished_at_kill, calls, n_ref)
    assert not repeated, f"{len(repeated)} calls for rows scored before a kill"
    per = Counter(c for c in calls if c is not None)
    assert set(per) == {key_of_prompt[p] for p in ref_prompts}
    assert sum(v - 1 for v in per.values()) <= 4 * N_KILLS
    a, b = pd.read_parquet(run_tmp / "ref" / "preds.parquet"), pd.read_parquet(run / "preds.parquet")
    pd.testing.assert_frame_equal(a, b)
    from sklearn.metrics import roc_auc_score
    metrics = lambda d: json.dumps({"n": len(d), "auc": roc_auc_score(d.is_toxic.astype(int), d.score),
                                    "acc": float((d.pred == d.is_toxic.astype(int)).mean()),
                                    "acc_cc": float((d.pred_cc == d.is_toxic.astype(int)).mean())}, sort_keys=True)
    same = metrics(a) == metrics(b)
    assert same
    # rows are the items; batch entries are bookkeeping whose keys depend on how the remaining rows were batched
    _check_store(run_tmp / "ref" / "items.sqlite", db, reliability, "toxicity-zeroshot-gpt-4o-mini", N_KILLS, same,
                 len(repeated), only=lambda r: r.get("kind") == "zs_row", rows=b.idx.tolist(), n_rows=len(a))


def _iat_metrics(results_jsonl, seed) -> str:
    "Per-pair IAT effects recomputed from a run's iat_results_<model>.jsonl, as sorted-key JSON."
    from acrb_nb.iat import score_trials, pair_effects
    df = pd.read_json(results_jsonl, lines=True, dtype=False)
    eff = pair_effects(score_trials(df), n_boot=200, n_perm=200, seed=seed)
    return json.dumps(json.loads(eff.to_json(orient="records")), sort_keys=True)


IAT_KW = dict(dimensions=["gender", "race"], words=4, pairs_per_combo=2, seed=11, analysis={"n_boot": 200, "n_perm": 200},
              execution={"progress": False})


def test_iat_seed_design_sim(run_tmp, forks, reliability):
    "IAT with the simulator: profile-image generation (its own run) then judge trials, killed anywhere in either."
    from acrb_nb.iat import iat_study
    ref = iat_study("sim", run_dir=str(run_tmp / "ref"), **IAT_KW)
    ref_dbs = [run_tmp / "ref" / "images" / "items.sqlite", run_tmp / "ref" / "items.sqlite"]
    run = run_tmp / "killed"
    dbs = [run / "images" / "items.sqlite", run / "items.sqlite"]
    pts = kill_points(("iat-sim",), done_count(ref_dbs), N_KILLS)
    kill_at(forks, "acrb_nb.iat:iat_study", {"model": "sim", "run_dir": str(run), **IAT_KW}, {}, dbs, pts)
    forks.run("acrb_nb.iat:iat_study", {"model": "sim", "run_dir": str(run), **IAT_KW}, {})
    repeated = sum(a - 1 for db in dbs for a in _attempts(db).values())
    assert repeated == 0, f"{repeated} finished items were computed again after a kill"
    res = run / ref.results_path.name
    a, b = ref.results_path.read_text().replace(str(run_tmp / "ref"), "RUN"), res.read_text().replace(str(run), "RUN")
    assert a == b, "iat_results jsonl differs from the uninterrupted run (image paths aside)"
    same = _iat_metrics(ref.results_path, IAT_KW["seed"]) == _iat_metrics(res, IAT_KW["seed"])
    assert same
    assert len(b.splitlines()) == len(ref.trials) and pd.read_json(res, lines=True).key.is_unique
    _check_store(ref_dbs[0], dbs[0], reliability, "iat-seed-sim", 0, True, 0, record=False)  # the images run
    _check_store(ref_dbs[1], dbs[1], reliability, "iat-seed-sim", N_KILLS, same, repeated,
                 rows=pd.read_json(res, lines=True).key.tolist(), n_rows=len(ref.trials))


def test_iat_text_design_openai_server(run_tmp, forks, reliability, monkeypatch):
    "IAT text design (gpt-4o-mini label log-probs) against a FakeOpenAI process; every trial's prompt is unique."
    from acrb_nb.iat import iat_study
    log = run_tmp / "openai.jsonl"
    proc, url = start_server_process("openai", log_path=log, latency=0.03, hooks="reliability_helpers:hooks", env=server_env())
    kw = {"model": "gpt-4o-mini", "design": "text", **IAT_KW}
    try:
        for k, v in {**DUMMY_ENV, "OPENAI_BASE_URL": url}.items(): monkeypatch.setenv(k, v)
        ref = iat_study(run_dir=str(run_tmp / "ref"), **kw)
        n_ref = len(read_log(log))
        ref_prompts = [c["prompt"] for c in read_log(log)]
        assert len(set(ref_prompts)) == len(ref_prompts) == len(ref.trials)
        run = run_tmp / "killed"
        db = run / "items.sqlite"
        log_at_kill, finished_at_kill = [], []
        instr = {t["trial_id"]: t["instruction"] for t in ref.trials}
        prompt_of = {tid: next(p for p in ref_prompts if ins in p) for tid, ins in instr.items()}
        def snap(i):
            log_at_kill.append(len(read_log(log)))
            finished_at_kill.append({prompt_of[json.loads(r)["trial_id"]] for r in _done_records(db)})
        pts = kill_points(("iat-text-openai",), done_count([run_tmp / "ref" / "items.sqlite"]), N_KILLS)
        kill_at(forks, "acrb_nb.iat:iat_study", {**kw, "run_dir": str(run)}, {"OPENAI_BASE_URL": url}, [db], pts, on_kill=snap)
        forks.run("acrb_nb.iat:iat_study", {**kw, "run_dir": str(run)}, {"OPENAI_BASE_URL": url})
    finally:
        stop_server_process(proc)
    calls = _answered(log, n_ref)
    repeated = _windows(log_at_kill, finished_at_kill, calls, n_ref)
    assert not repeated, f"{len(repeated)} calls for trials finished before a kill"
    per = Counter(c for c in calls if c is not None)
    assert set(per) == set(ref_prompts) and sum(v - 1 for v in per.values()) <= 4 * N_KILLS
    res = run / ref.results_path.name
    assert ref.results_path.read_text() == res.read_text()
    same = _iat_metrics(ref.results_path, IAT_KW["seed"]) == _iat_metrics(res, IAT_KW["seed"])
    assert same
    _check_store(run_tmp / "ref" / "items.sqlite", db, reliability, "iat-text-gpt-4o-mini", N_KILLS, same, len(repeated),
                 rows=pd.read_json(res, lines=True).key.tolist(), n_rows=len(ref.trials))


def _done_records(db):
    import sqlite3
    con = sqlite3.connect(str(db))
    try: return [r for (r,) in con.execute("SELECT record FROM items WHERE status='done'")]
    finally: con.close()
