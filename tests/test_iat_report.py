"""End to end: the IAT report template (nbs/iat.ipynb) through the `acrb-report` command line on the simulator.

One papermill run (~15-25 s on 2 cores): the template's defaults, narrowed to two dimensions.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[1]


def test_iat_report_cli(tmp_path):
    out, run = tmp_path / "reports", tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg", "ACRB_PROGRESS": "0"}
    cmd = [sys.executable, "-m", "acrb_nb.report", "iat", "-p", "model", "sim", "-y", "dimensions: [gender, socioeconomic_status]",
           "-p", "run_dir", str(run), "--out", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {(x["study"], x["model"]): x for x in json.loads((out / "index.json").read_text())["reports"]}
    row = rows[("iat", "sim")]
    assert row["status"] == "ok" and row["headlines"]["pairs"] == 4
    assert row["headlines"]["refusal_rate"] == 0 and 0 < row["headlines"]["max_abs_D"] < 3
    html = (out / "iat" / "sim.html").read_text()
    assert "planted value inside the 95% interval" in html and "every word equally often at A and at B" in html
    assert html.count("data:image/png") >= 2  # forest and position plots are inline even with MPLBACKEND=Agg
    results = run / "iat_results_sim.jsonl"
    lines = [json.loads(l) for l in results.read_text().splitlines()]
    assert len(lines) == 4 * 162 and {l["outcome"] for l in lines} == {"ok"}
    assert (run / "images" / "profile_metadata.jsonl").exists()
