"""The four report templates run under papermill from any working directory, and the fairness report reads a user's
own data by a path relative to the user's folder (issue 18, items 8 and 9).

`papermill /abs/path/nbs/<t>.ipynb out.ipynb` is run as a subprocess from an empty temporary folder, and nothing but
the run folder may appear there. The parameters are made small (what is tested is where the template runs from, not
its statistics). Every template also runs from the repository root, the folder a user who cloned it starts in: that
is `test_reliability_secrets.py`, which renders all four there (with API keys in the environment).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from report_files import report_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "MPLBACKEND": "Agg", "ACRB_PROGRESS": "0"}
SMALL = {  # template -> parameters that keep the run short
    "acrb": {"n_base_prompts": 9, "n_boot": 200},
    "iat": {"n_boot": 200, "n_perm": 200},
    # the random-weight tiny GPT-2: where the template runs from is tested here; it runs SmolLM2 in nbdev_test (IN_TEST)
    "toxicity": {"model": "tiny-gpt2", "max_rows": 24, "select": False, "ig_rows": 1, "ig_steps": 4, "ig_baseline_rows": 2},
    "fairness": {"n_boot": 200},
}
WRITES_RUNS = ("acrb", "toxicity", "iat")  # templates whose default run folder is under the working directory


def _errors(ipynb: Path) -> list:
    nb = json.loads(ipynb.read_text())
    return [f"{o.get('ename')}: {o.get('evalue')}" for c in nb["cells"] for o in c.get("outputs", [])
            if o.get("output_type") == "error"]


@pytest.mark.parametrize("template", ["acrb", "fairness", "iat", "toxicity"])
def test_template_runs_from_any_folder(template, tmp_path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    params = dict(SMALL[template])
    own_runs = template in WRITES_RUNS  # the default run folder: runs/ under the user's folder
    out = tmp_path / f"{template}.out.ipynb"
    args = [sys.executable, "-m", "papermill", str(NBS / f"{template}.ipynb"), str(out), "--no-progress-bar", "-k", "python3"]
    for k, v in params.items(): args += ["-p", k, str(v)]
    r = subprocess.run(args, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=850)
    assert r.returncode == 0, (r.stderr[-3000:], _errors(out) if out.exists() else None)
    assert out.exists() and _errors(out) == []
    # nothing was written next to the user except what they asked for (and the run folder)
    assert sorted(p.name for p in cwd.iterdir()) == (["runs"] if own_runs else [])
    if own_runs:
        assert list((cwd / "runs" / template).rglob("manifest.json")), sorted(map(str, (cwd / "runs").rglob("*")))[:10]


def _compas(folder: Path) -> Path:
    "ProPublica's published COMPAS counts as a one-row-per-defendant CSV in the user's folder."
    from acrb_nb.fairness import expand_counts
    (folder / "data").mkdir(parents=True)
    path = folder / "data" / "compas.csv"
    expand_counts(ROOT / "data" / "fairness" / "compas_propublica.counts.csv").to_csv(path, index=False)
    return path


def test_fairness_cli_reads_a_relative_path_from_the_users_folder(tmp_path):
    _compas(tmp_path)
    cmd = [sys.executable, "-m", "acrb_nb.report", "fairness", "-p", "model", "compas", "-p", "preds", "data/compas.csv",
           "-p", "label_col", "reoffended", "-p", "pred_col", "high_risk", "-p", "score_col", "", "-p", "id_cols", "race",
           "-p", "reference", "caucasian", "-p", "n_boot", "200", "-p", "out", "outputs/compas.csv"]
    r = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)  # no settings.ini above
    assert r.returncode == 0, r.stderr[-3000:]
    html = report_file(tmp_path / "reports", "fairness", "compas").read_text()
    assert "African-American" in html and "Against a reference group" in html and "fnr" in html
    groups = pd.read_csv(tmp_path / "outputs" / "compas.csv").set_index("group")  # `out` is the user's folder too
    assert round(100 * groups.loc["race:African-American=1", "false_positive_rate"], 2) == 44.85  # ProPublica's figures
    assert round(100 * groups.loc["race:Caucasian=1", "false_negative_rate"], 2) == 47.72
    pw = pd.read_csv(tmp_path / "outputs" / "compas.pairwise.csv").set_index("identity").loc["race:African-American"]
    assert pw.reference == "race:Caucasian" and round(pw.SPD, 3) == 0.240
    assert pw.FPR_diff_lo > 0 and pw.FNR_diff_hi < 0


def test_fairness_cli_missing_relative_path_names_the_users_folder(tmp_path):
    cmd = [sys.executable, "-m", "acrb_nb.report", "fairness", "-p", "preds", "data/nothing.csv", "-p", "n_boot", "0"]
    r = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2  # refused before papermill starts (issue 28): a usage error, nothing written
    assert str(tmp_path.resolve() / "data" / "nothing.csv") in r.stderr and "no such file" in r.stderr
    assert list(tmp_path.iterdir()) == []
