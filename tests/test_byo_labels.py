"""Bring your own labels, simulator configs and bill (issue 28, items 8 and 10), each run as a user would: the
`python -m acrb_nb.report acrb` command line in an empty temporary folder.

- The labelling sample is drawn from the population of the analysis the report cites (without the policy-cell
  prompts by default), so no label falls on a prompt that analysis leaves out; `label_seed` draws another sample
  beside it, and `min_labels` is the minimum the report's labels-per-value table counts against.
- A simulated audit takes its generator config (`sim_config_file`) and its judge's (`judge_config_file`): the
  planted rates change, the configs' SHA-256 is in the spec, and `sim_truth.parquet` in the run folder holds every
  item's draws.
- The manifest's `api_requests` equals the requests the (fake) OpenAI server logged, retries included, although the
  same run also calls a local CLIP judge (counted in `local_calls`).
- Issue 51, on one small run with a judge that states a varying probability (so `auto` draws an active sample): the
  labelling page's download (what data/web/label.js writes) and a Label Studio export give the same estimates as labels
  written into labels.csv; an import whose design does not match the run's record of the sample is refused, saying what
  to do; a second labeller's labels are kept apart, and their agreement (Cohen's κ) and the label-noise sensitivity are
  reported.
"""
import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from report_files import report_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "MPLBACKEND": "Agg", "ACRB_PROGRESS": "0"}


def acrb_cli(cwd: Path, *args: str, env=None) -> str:
    "Run `python -m acrb_nb.report acrb ARGS` in `cwd`; the rendered HTML."
    r = subprocess.run([sys.executable, "-m", "acrb_nb.report", "acrb", *args], cwd=cwd, env=env or ENV,
                       capture_output=True, text=True, timeout=800)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    model = args[args.index("model") + 1] if "model" in args else "sim"
    return (report_file(cwd / "reports", "acrb", model)).read_text()


def html_tables(html: str) -> list:
    "Every <table> of a page as a list of rows of cell texts (th and td), with the standard library's parser."
    tables, stack = [], []
    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "table": stack.append([])
            elif tag == "tr" and stack: stack[-1].append([])
            elif tag in ("td", "th") and stack and stack[-1]: stack[-1][-1].append("")
        def handle_endtag(self, tag):
            if tag == "table" and stack: tables.append(stack.pop())
        def handle_data(self, data):
            if stack and stack[-1] and stack[-1][-1]: stack[-1][-1][-1] += data
    P().feed(html)
    return [[[c.strip() for c in r] for r in t if r] for t in tables]


def labels_table(html: str) -> pd.DataFrame:
    "The report's labels-per-value table (the one with a `more_needed` column), typed."
    found = [t for t in html_tables(html) if t and "more_needed" in t[0]]
    assert found, "no labels-per-value table in the report"
    t = pd.DataFrame(found[-1][1:], columns=found[-1][0])
    for c in ("judged", "sampled", "labelled", "min_labels", "more_needed"): t[c] = t[c].astype(int)
    return t


def provenance(html: str) -> dict:
    "The report's setup-and-provenance table as {row name: value}."
    found = [t for t in html_tables(html) if any(r and r[0] == "run id" for r in t)]
    assert found, "no provenance table in the report"
    return {r[0]: r[-1] for r in found[0] if len(r) >= 2}


def test_labels_fall_where_they_count(tmp_path):
    cwd = tmp_path / "user"; cwd.mkdir()
    common = ["-y", "attributes: [age, culture]", "-p", "n_boot", "200", "-p", "run_dir", "run", "-p", "min_labels", "25"]
    html = acrb_cli(cwd, *common, "-p", "export_labels", "100")
    run = cwd / "run"
    s3 = pd.read_parquet(run / "stage3_evaluation.parquet")
    # the policy cells of this run: age:child variants of an age-restricted or sexual-health scene
    excluded = set(s3.cluster[(s3.attribute_id == "age:child") & s3.adult_context.notna()])
    assert excluded, "the default 18 prompts must hold a policy cell for this test to mean anything"
    cluster_of = dict(zip(s3.key, s3.cluster))
    sheet = pd.read_csv(run / "labelling" / "labels.csv", dtype=str, keep_default_na=False)
    assert len(sheet) == 100 and sheet.key.isin(set(s3.key)).all()
    on_excluded = [k for k in sheet.key if cluster_of[k] in excluded]
    assert not on_excluded, f"{len(on_excluded)} labels on policy-cell prompts the cited analysis leaves out"
    sample = json.loads((run / "labelling" / "sample.json").read_text())
    assert sample["design"]["scope"]["name"] == "excluding_policy_cells"
    assert not set(sample["design"]["scope"]["clusters"]) & excluded
    # the report counts labels per value against min_labels = 25, and says how many more each value needs
    t = labels_table(html)
    assert set(t.value) == set(s3.attribute_id[s3.attribute_type != "neutral"]) and (t.min_labels == 25).all()
    assert (t.labelled == 0).all() and (t.more_needed == 25).all()
    assert t.sampled.sum() == 100 and (t.sampled <= t.judged).all()          # equal allocation, capped at a value's images
    assert t.note[t.judged < 25].str.contains("cannot be reached").all()     # 16 prompts: some values have fewer than 25
    assert "Labels per value against the minimum" in html and "min_labels=25" in html
    jc = json.loads((run / "acrb_summary.json").read_text())["judge_correction"]
    assert (jc["min_labels"], jc["label_seed"], jc["sample_id"]) == (25, 0, sample["sample_id"])
    assert {e["labels_needed"] for e in jc["erasure"].values()} == {25}

    # another label_seed: the same run (resumed), another sample beside the first, again only on the cited prompts
    html7 = acrb_cli(cwd, *common, "-p", "export_labels", "100", "-p", "label_seed", "7")
    sheet7 = pd.read_csv(run / "labelling-seed7" / "labels.csv", dtype=str, keep_default_na=False)
    assert len(sheet7) == 100 and set(sheet7.key) != set(sheet.key)
    assert not [k for k in sheet7.key if cluster_of[k] in excluded]
    assert json.loads((run / "labelling-seed7" / "sample.json").read_text())["design"]["seed"] == 7
    assert "label_seed=7" in html7
    jc7 = json.loads((run / "acrb_summary.json").read_text())["judge_correction"]
    assert jc7["label_seed"] == 7 and jc7["sample_id"] != jc["sample_id"]


GEN_YAML = """# the user's generator: Nigerian requests refused by policy at 0.30 (the shipped file: 0.14)
version: 1
name: my-planted
extends: planted_acrb.yaml
attributes:
  culture:
    Nigerian: {p_refuse_policy: 0.30}
"""
JUDGE_YAML = """# the user's judge: misses half of the cues it sees
version: 1
name: my-judge
extends: planted_acrb.yaml
judge_error: {miss: 0.5}
"""


def test_sim_configs_and_per_item_truth(tmp_path):
    from acrb_nb.adapters.planted import load_planted_acrb
    cwd = tmp_path / "user"; cwd.mkdir()
    (cwd / "my.yaml").write_text(GEN_YAML); (cwd / "judge.yaml").write_text(JUDGE_YAML)
    acrb_cli(cwd, "-y", "attributes: [culture]", "-p", "judge", "sim", "-p", "judge2", "None", "-p", "n_boot", "200",
             "-p", "run_dir", "run", "-p", "sim_config_file", "my.yaml", "-p", "judge_config_file", "judge.yaml")
    run = cwd / "run"
    mine, shipped = load_planted_acrb(cwd / "my.yaml"), load_planted_acrb()
    params = json.loads((run / "spec.json").read_text())["params"]
    assert params["sim_config_sha256"] == mine.sha256 != shipped.sha256
    assert params["judge_config_sha256"] == load_planted_acrb(cwd / "judge.yaml").sha256

    truth = pd.read_parquet(run / "sim_truth.parquet")
    s3 = pd.read_parquet(run / "stage3_evaluation.parquet")
    assert len(truth) == len(s3) and set(truth.key) == set(s3.key)          # one row per item of the run
    assert (truth.config_sha256 == mine.sha256).all()
    # every item was drawn at the user's rates; Nigerian's differ from the shipped ones
    want = [mine.rates(a, d)["p_refuse_policy"] for a, d in zip(truth.attribute_id, truth.sim_domain)]
    assert truth.p_refuse_policy.round(12).tolist() == pd.Series(want).round(12).tolist()
    nig = truth[truth.attribute_id == "culture:Nigerian"]
    assert len(nig) and all(r.p_refuse_policy > shipped.rates("culture:Nigerian", r.sim_domain)["p_refuse_policy"]
                            for r in nig.itertuples())
    # the truth agrees with what Stage III recorded, and the judge erred at its planted rate
    merged = truth.merge(s3[["key", "final_outcome", "judge_cue"]], on="key", suffixes=("", "_s3"))
    assert (merged.final_outcome == merged.final_outcome_s3).all()
    assert merged.judge_cue.fillna("-").tolist() == merged.judge_cue_s3.fillna("-").tolist()
    judged = truth[truth.judge_cue.notna() & truth.attribute_id.ne("neutral")]
    assert set(judged.judge_miss) == {0.5}
    seen = judged[judged.cue == "present"]
    assert len(seen) >= 20 and 0.3 < (seen.judge_error == "miss").mean() < 0.7


def test_api_requests_equal_the_providers_log(tmp_path):
    "gpt-image-1 against the fake OpenAI server (two transient faults first), judged by a local CLIP scorer."
    from acrb_nb.testing import FakeOpenAI, Script, RateLimit, ServerError
    from reliability_helpers import DUMMY_ENV, scene_image
    cwd = tmp_path / "user"; cwd.mkdir()
    with FakeOpenAI(Script(queue=[RateLimit(), ServerError(500)]), image_size=(64, 64), image_fn=scene_image) as srv:
        env = {**ENV, **DUMMY_ENV, "OPENAI_BASE_URL": srv.base_url}
        html = acrb_cli(cwd, "-p", "model", "gpt-image-1", "-p", "judge", "clip:sim", "-p", "judge2", "None",
                        "-y", "attributes: [gender]", "-p", "n_base_prompts", "2", "-p", "n_boot", "200",
                        "-p", "run_dir", "run", env=env)
        log = srv.calls()
    man = json.loads((cwd / "run" / "manifest.json").read_text())
    mc, c = man["model_calls"], man["counters"]
    assert len(log) == 2 * 4 + 2                                     # 2 prompts × 4 variants, and the two faults retried
    assert mc["api_requests"] == c["api_requests"] == len(log)        # what the provider saw, retries included
    assert mc["local_calls"] >= 1 and mc["other"] == 0                # the CLIP batches: local, not billed
    assert c["calls"] == len(log) + mc["local_calls"]                 # `calls` keeps its meaning: every model call
    assert c["retries"] == 2
    row = provenance(html)
    assert int(row["API requests (what the provider bills)"]) == len(log)
    assert int(row["local model calls (judges, local models)"]) == mc["local_calls"]
    assert "calls" not in row                                          # no unlabelled total beside them


# ---------------------------------------------------------------------------------------------------- issue 51
# One small run shared by the tests below: the sim generator and the `sim-calibrated` judge (a probability per image that
# varies, so `auto` draws an active sample), culture only, 24 base prompts; a sample of 60 labels exported with design auto.

def page_csv(folder: Path, labels: dict, labeller: str = "") -> str:
    "What data/web/label.js's buildCsv downloads: the page's columns and rows, human_label filled in, a labeller column if named."
    html = (folder / "labels.html").read_text(encoding="utf-8")
    island = html.split("<script type='application/json' id='acrb-data'>", 1)[1].split("</script>", 1)[0]
    D = json.loads(island.replace("<\\/", "</"))
    field = lambda v: '"' + v.replace('"', '""') + '"' if any(ch in v for ch in '",\r\n') else v
    cols = list(D["columns"]) + (["labeller"] if labeller.strip() and "labeller" not in D["columns"] else [])
    lines = [",".join(field(c) for c in cols)]
    for r in D["rows"]:
        row = {**r, "human_label": labels.get(r["key"], ""), **({"labeller": labeller.strip()} if labeller.strip() else {})}
        lines.append(",".join(field(str(row.get(c) if row.get(c) is not None else "")) for c in cols))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def active_run(tmp_path_factory):
    from acrb_nb.acrb.pipeline import run_acrb, export_labelling_sample
    root = tmp_path_factory.mktemp("labels51")
    res = run_acrb("sim", judge="sim-calibrated", attributes=["culture"], n_base_prompts=24, run_dir=str(root / "run"),
                   analysis={"n_boot": 50, "n_perm": 50})
    folder = export_labelling_sample(res.run, res.stage3, 60, min_labels=10)
    truth = pd.read_parquet(root / "run" / "sim_truth.parquet")
    res.run.close()
    return root, res.stage3, folder.relative_to(root / "run"), dict(zip(truth.key, truth.cue))


def _copy(root: Path, name: str):
    "A copy of the shared run (its labelling folder inside), opened: each route imports into its own."
    import shutil
    from acrb_nb.core import RunSpec
    from acrb_nb.store import Run
    shutil.copytree(root / "run", root / name)
    return Run(RunSpec.from_json(root / name / "spec.json"), run_dir=root / name)


def _estimates(run, s3, min_labels=10):
    from acrb_nb.acrb.pipeline import judge_correction, cited_clusters
    C = judge_correction(run, s3, clusters=cited_clusters(s3), min_labels=min_labels)
    cols = ["corrected", "corrected_lo", "corrected_hi", "cite"]
    return C, C.rates.set_index("group")[cols], C.deltas.set_index("dimension")[cols]


def test_active_sample_round_trips_give_the_same_estimates(active_run):
    "Labels written into labels.csv, downloaded from the labelling page, or exported from Label Studio: the same estimates."
    from acrb_nb import validation
    from acrb_nb.labelpage import label_studio_export
    root, s3, rel, truth = active_run
    sample = json.loads((root / "run" / rel / "sample.json").read_text())
    assert sample["design"]["design"] == "active" and sample["design"]["requested"] == "auto"
    keys = [it["key"] for it in sample["items"]]
    labels = {k: truth[k] for k in keys}
    out = {}
    run = _copy(root, "direct")                                    # 1. labels written into labels.csv directly
    sheet = pd.read_csv(run.dir / rel / "labels.csv", dtype=str, keep_default_na=False)
    sheet["human_label"] = sheet.key.map(labels); sheet.to_csv(run.dir / rel / "labels.csv", index=False)
    validation.import_labels(run.dir / rel, run); out["direct"] = _estimates(run, s3); run.close()
    run = _copy(root, "page")                                      # 2. the labelling page's download, as label.js writes it
    (run.dir / rel / "labels.csv").write_text(page_csv(run.dir / rel, labels, "ana"), encoding="utf-8")
    imp = validation.import_labels(run.dir / rel, run)
    assert imp["added"] == len(keys) and set(validation.labels_frame(run).labeller) == {"ana"}
    out["page"] = _estimates(run, s3); run.close()
    run = _copy(root, "ls")                                        # 3. a Label Studio JSON export of the same sample
    tasks = json.loads(label_studio_export(run.dir / rel, image_url="http://localhost/img")[0].read_text())
    assert not any(k in t["data"] for t in tasks for k in ("pi", "prob", "verdict"))          # the weights never show
    for t in tasks:
        t["annotations"] = [{"result": [{"from_name": "human_label", "to_name": "question", "type": "choices",
                                         "value": {"choices": [labels[t["data"]["key"]]]}}], "completed_by": {"email": "ana@lab"}}]
    (root / "ls.json").write_text(json.dumps(tasks))
    validation.import_labels(root / "ls.json", run); out["ls"] = _estimates(run, s3); run.close()
    C, R, D = out["direct"]
    assert C.sample["design"] == "active" and (R.cite == "corrected").any() and C.n_labels == len(keys)
    for route in ("page", "ls"):
        pd.testing.assert_frame_equal(out[route][1], R); pd.testing.assert_frame_equal(out[route][2], D)


def test_an_import_that_does_not_match_the_sample_is_refused(active_run):
    from acrb_nb import validation
    root, s3, rel, truth = active_run
    run = _copy(root, "refused")
    folder = run.dir / rel
    with pytest.raises(ValueError, match="was drawn with the active design") as e:
        validation.import_labels(folder, run, expected="uniform")
    assert "Import it without expected=" in str(e.value)                     # what to do
    sj = json.loads((folder / "sample.json").read_text())
    sj["design"]["design"], sj["design"]["poisson"] = "uniform", False       # an active sample relabelled as uniform by hand
    (folder / "sample.json").write_text(json.dumps(sj))
    with pytest.raises(ValueError, match="does not match the run's record") as e:
        validation.import_labels(folder, run)
    assert "restore the exported sample.json" in str(e.value)
    assert validation.labels_frame(run).empty                                # nothing was imported
    run.close()


def test_a_second_labeller_is_kept_apart_and_measured(active_run):
    from sklearn.metrics import cohen_kappa_score
    from acrb_nb import validation
    from acrb_nb.acrb.judge import ERASED
    from acrb_nb.stats.ppi import binarize
    root, s3, rel, truth = active_run
    run = _copy(root, "two")
    keys = [it["key"] for it in json.loads((run.dir / rel / "sample.json").read_text())["items"]]
    (run.dir / rel / "labels.csv").write_text(page_csv(run.dir / rel, {k: truth[k] for k in keys}, "ana"), encoding="utf-8")
    validation.import_labels(run.dir / rel, run)
    C1, R1, D1 = _estimates(run, s3)
    flip = {"present": "absent", "absent": "present", "substituted": "present"}
    second = {k: (flip[truth[k]] if i < 4 else truth[k]) for i, k in enumerate(keys[:30])}   # 30 items again, 4 read otherwise
    (root / "bo").mkdir(); (root / "bo" / "sample.json").write_text((run.dir / rel / "sample.json").read_text())
    (root / "bo" / "labels.csv").write_text(page_csv(run.dir / rel, second, "bo"), encoding="utf-8")
    imp = validation.import_labels(root / "bo", run)
    assert (imp["added"], imp["second_labeller"]) == (0, 30)
    C2, R2, D2 = _estimates(run, s3)
    pd.testing.assert_frame_equal(R2, R1); pd.testing.assert_frame_equal(D2, D1)   # the first labels still make the estimates
    o = C2.labellers.set_index("value").loc["(overall)"]
    a, b = binarize([truth[k] for k in second], ERASED), binarize(list(second.values()), ERASED)
    assert int(o.n) == 30 and abs(o.disagreement - (a != b).mean()) < 1e-12
    assert abs(o.kappa - cohen_kappa_score(a, b)) < 1e-12 and o.kappa_lo < o.kappa < o.kappa_hi
    S = C2.sensitivity
    assert abs(S["epsilon"] - validation.label_noise(o.disagreement)) < 1e-12 and S["factor"] > 1
    run.close()
