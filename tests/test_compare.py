"""Model comparison (issue 32) with two real image adapters: gpt-image-1 and gemini-2.5-flash-image, each against its
loopback server (the real SDK clients, `OPENAI_BASE_URL` / `GOOGLE_GEMINI_BASE_URL`) with a different refusal rule —
the OpenAI server refuses every prompt naming a Muslim person, the Gemini server every prompt naming a Jewish person.
Audited on the same prompts and seed, the two runs are compared paired (`compare_acrb`) and with
`acrb-report compare RUN RUN` from an empty folder: the two planted differences are found, nothing else is.
"""
import json, os, subprocess, sys
from pathlib import Path

import pytest
from PIL import Image

from acrb_nb.acrb.pipeline import run_acrb
from acrb_nb.compare import compare_acrb
from acrb_nb.testing import FakeGemini, FakeOpenAI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[1]
KEYS = {"OPENAI_API_KEY": "sk-test-compare-0000000000000000", "GEMINI_API_KEY": "test-compare-gemini-key-000000"}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    "The religion audit (12 base prompts, 84 items) of each API model, each refusing one value."
    d = tmp_path_factory.mktemp("cmp")
    photos = sorted((ROOT / "data" / "images" / "people").glob("*.jpg"))
    # the servers draw a shipped photograph of a person (the default test card is a placeholder the detector refuses)
    photo = lambda prompt, size, inputs: Image.open(photos[len(prompt) % len(photos)]).convert("RGB").resize((96, 96))
    oai = FakeOpenAI({"rules": [{"contains": "Muslim", "action": "policy_refusal"}]}, image_fn=photo).start()
    gem = FakeGemini({"rules": [{"contains": "Jewish", "action": "policy_refusal"}]}, image_fn=photo).start()
    env = {**KEYS, "OPENAI_BASE_URL": oai.base_url, "GOOGLE_GEMINI_BASE_URL": gem.base_url, "ACRB_PROGRESS": "0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        kw = dict(attributes=["religion"], n_base_prompts=12, judge="clip:sim", analysis={"n_boot": 200, "n_perm": 200})
        runs = [run_acrb(m, run_dir=d / m, **kw) for m in ("gpt-image-1", "gemini-2.5-flash-image")]
    finally:
        oai.stop(); gem.stop()
        for k, v in old.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v
    return d, runs


def test_two_api_models_differ_where_their_rules_differ(two_runs):
    d, (a, b) = two_runs
    assert a.summary["total_failed"] == b.summary["total_failed"] == 0
    C = compare_acrb([a.run.dir, b.run.dir], n_boot=300)
    assert C.items.shared.tolist() == [84, 84] and C.items["not in every run"].tolist() == [0, 0]
    cells = C.cells[C.cells.outcome.eq("refused")].set_index("attribute_id")
    assert (cells.model_a.iloc[0], cells.model_b.iloc[0]) == ("gpt-image-1", "gemini-2.5-flash-image")
    muslim, jewish = cells.loc["religion:Muslim"], cells.loc["religion:Jewish"]
    assert (muslim.rate_a, muslim.rate_b, jewish.rate_a, jewish.rate_b) == (1.0, 0.0, 0.0, 1.0)
    assert muslim.p_adj <= 0.05 and jewish.p_adj <= 0.05 and {muslim.verdict, jewish.verdict} == {"difference"}
    others = C.cells.drop(index=C.cells.index[C.cells.outcome.eq("refused") &
                                              C.cells.attribute_id.isin(["religion:Muslim", "religion:Jewish"])])
    assert not (others.p_adj <= 0.05).any(), others[others.p_adj <= 0.05]     # nothing else differs
    # each model's own Δ_refusal is 1 (one value always refused, the others never): their difference is 0
    dd = C.delta_diffs[C.delta_diffs.outcome.eq("refused")].iloc[0]
    assert (dd.delta_a, dd.delta_b, dd["diff"], dd.verdict) == (1.0, 1.0, 0.0, "no evidence of a difference")


def test_acrb_report_compare_from_an_empty_folder(two_runs, tmp_path):
    d, _ = two_runs
    here = tmp_path / "empty"
    here.mkdir()
    cmd = [str(Path(sys.executable).parent / "acrb-report"), "compare", str(d / "gpt-image-1"), str(d / "gemini-2.5-flash-image"),
           "-p", "n_boot", "300", "--nbs", str(ROOT / "nbs")]
    p = subprocess.run(cmd, cwd=here, env={**os.environ, "ACRB_PROGRESS": "0"}, capture_output=True, text=True, timeout=500)
    assert p.returncode == 0, p.stdout + p.stderr
    html = (here / "reports" / "compare" / "gpt-image-1-vs-gemini-2.5-flash-image.html").read_text()
    assert "2 of " in html and "paired comparisons" in html and "religion:Muslim" in html
    index = (here / "reports" / "index.html").read_text()
    assert "<h2>Model comparisons</h2>" in index and "compare/gpt-image-1-vs-gemini-2.5-flash-image.html" in index
    row = json.loads((here / "reports" / "index.json").read_text())["reports"][0]
    assert row["study"] == "compare" and row["headlines"]["differences"] == 2 and row["headlines"]["shared_items"] == 84
    assert sorted(q.name for q in here.iterdir()) == ["reports"]     # nothing else written next to the user
    # a run that shares nothing with another is refused, naming what differs
    q = subprocess.run(cmd[:3] + [str(here / "nothing")] + cmd[4:], cwd=here, capture_output=True, text=True, timeout=120)
    assert q.returncode == 2 and "nothing" in q.stderr


def test_fairness_predictions_compared_on_the_same_rows(tmp_path):
    "Two prediction columns of one table (alt-profanity-check at its threshold and at score ≥ 0.2), from a user's folder."
    import pandas as pd
    t = pd.read_csv(ROOT / "data" / "fairness" / "toxigen200.alt-profanity-check.csv")
    t["pred_0.2"] = (t.score >= 0.2).astype(int)
    t.to_csv(tmp_path / "preds.csv", index=False)
    cmd = [str(Path(sys.executable).parent / "acrb-report"), "compare", "--nbs", str(ROOT / "nbs"), "-p", "model", "apc",
           "-p", "preds", "preds.csv", "-y", "pred_cols: [pred, pred_0.2]", "-p", "label_col", "is_toxic", "-p", "id_cols",
           "target_group", "-p", "n_boot", "300"]
    p = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "ACRB_PROGRESS": "0"}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    row = json.loads((tmp_path / "reports" / "index.json").read_text())["reports"][0]
    assert (row["study"], row["headlines"]["rows"], row["headlines"]["predictions"]) == ("compare", 200, 2)
    assert row["headlines"]["differences"] >= 1          # 27 rows more positive at the lower threshold, all one way
    assert "target_group=muslim" in (tmp_path / "reports" / "compare" / "apc.html").read_text()
