"""End to end: the IAT report template (nbs/iat.ipynb) through the `acrb-report` command line on the simulator.

Three papermill runs (~15-25 s each on 2 cores), all started from a temporary working directory (the template must
not depend on where it is run from): the template's defaults narrowed to two dimensions, writing a labelling sample;
the same run again with that sample labelled (judge-reported and corrected choice rates side by side); and the plan
only, for an API judge behind a loopback server that must see no request.
"""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "nbs" / "iat.ipynb"


def _report(tmp_path, out, *args, env=None):
    "Run `acrb-report <abs path of nbs/iat.ipynb> ...` from tmp_path; return the index row of the report."
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg", "ACRB_PROGRESS": "0",
           "PYTHONPATH": str(ROOT), **(env or {})}
    cmd = [sys.executable, "-m", "acrb_nb.report", str(TEMPLATE), *args, "--out", str(out)]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((out / "index.json").read_text())["reports"]
    assert len(rows) == 1 and rows[0]["status"] == "ok", rows
    return rows[0], (out / rows[0]["html"]).read_text()


def test_iat_report_cli(tmp_path):
    run, sample = tmp_path / "run", tmp_path / "labels"
    row, html = _report(tmp_path, tmp_path / "reports", "-p", "model", "sim", "-y", "dimensions: [gender, socioeconomic_status]",
                        "-p", "run_dir", str(run), "-p", "export_labels", str(sample), "-p", "n_labels", "240")
    h = row["headlines"]
    assert row["model"] == "sim" and h["pairs"] == 4
    assert h["refusal_rate"] == 0 and 0 < h["max_abs_D"] < 3
    assert h["choice_rates"] == "judge-reported, uncorrected"
    assert "planted value inside the 95% interval" in html and "every word equally often at A and at B" in html
    assert "Audit plan" in html and "human labels per pair × position" in html       # the plan comes first
    assert html.index("Audit plan") < html.index("Design summary")
    assert "Choice rates are judge-reported, uncorrected (no human labels)" in html
    assert html.count("data:image/png") >= 2  # forest and position plots are inline even with MPLBACKEND=Agg
    results = run / "iat_results_sim.jsonl"
    lines = [json.loads(l) for l in results.read_text().splitlines()]
    assert len(lines) == 4 * 162 and {l["outcome"] for l in lines} == {"ok"}
    assert (run / "images" / "profile_metadata.jsonl").exists()
    # the labelling sample: about 240 valid-choice trials, 30 per pair × congruent position in expectation (design auto: the
    # sim reading states a varying confidence, so an active, Poisson sample of random size), blank labels
    with open(sample / "labels.csv", newline="", encoding="utf-8") as f: rows = list(csv.DictReader(f))
    design = json.loads((sample / "sample.json").read_text())["design"]
    assert (design["design"], design["requested"]) == ("active", "auto")
    assert abs(len(rows) - 240) <= 30 and {r["human_label"] for r in rows} == {""}
    assert {(r["pair_id"], r["cc_pos"]) for r in rows} == {(p, c) for p in {l["pair_id"] for l in lines} for c in "AB"}

    # a labeller reads the answers: the model's choice, except that 20 answers of one pair were read wrongly
    choice = {l["key"]: l["choice"] for l in lines}
    ses = [r for r in rows if r["pair_id"] == "socioeconomic_status:low|high"][:20]
    for r in rows: r["human_label"] = choice[r["key"]]
    for r in ses: r["human_label"] = {"A": "B", "B": "A"}[choice[r["key"]]]
    with open(sample / "labels.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    row2, html2 = _report(tmp_path, tmp_path / "reports2", "-p", "model", "sim", "-y", "dimensions: [gender, socioeconomic_status]",
                          "-p", "run_dir", str(run), "-p", "labels", str(sample))
    assert row2["headlines"]["choice_rates"] == "corrected"
    n = len(rows)
    assert f"Cite the corrected rates: {n} hand-labelled trials" in html2 and f"labels: {n} of a sample of {n} imported" in html2
    assert "judge_reported" in html2 and "design active (auto: " in html2 and "corrected (" in html2
    assert row2["headlines"]["pairs"] == 4 and row2["headlines"]["max_abs_D"] == h["max_abs_D"]   # resumed: same numbers


def test_iat_report_plan_only_makes_no_call(tmp_path):
    from acrb_nb.testing import FakeOpenAI, Script
    with FakeOpenAI(Script()) as srv:
        row, html = _report(tmp_path, tmp_path / "reports", "-p", "model", "gpt-4o-mini-judge", "-p", "plan_only", "True",
                            "-p", "run_dir", str(tmp_path / "run"), "-y", f"judge_kwargs: {{base_url: {srv.base_url}}}",
                            "-p", "usd_per_judge_call", "0.002", env={"OPENAI_API_KEY": "test-key-not-secret", "OPENAI_BASE_URL": srv.base_url})
        calls = srv.calls()
    assert calls == [], calls                       # zero model calls
    assert not (tmp_path / "run").exists()          # and no run folder
    h = row["headlines"]
    assert h["plan_only"] is True and h["pairs"] == 7 and h["trials"] == 7 * 162 and h["judge_calls"] == 7 * 162
    assert h["cost_usd"] == round(7 * 162 * 0.002, 2)               # the judge at usd_per_judge_call; no image generated
    assert html.count("Plan only (plan_only=True)") == 1 and "human labels in total" in html
    assert "Design summary" not in html and "Embedding variant" not in html  # the report ends at the plan (stop_report)
