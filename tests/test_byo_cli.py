"""Bring your own (issue 28): what a researcher types at `acrb-report`, from an empty folder, works the first time.

Each test runs the command line as a subprocess (`python -m acrb_nb.report`) in an empty temporary folder, as a new user
would, and asserts the behaviour issue 28 asks for: one rule for list parameters (item 2), a failed attempt never
replacing a good report nor changing a run's status (item 3), the IAT plan in people's numbers (item 4), model names
resolved before anything runs (item 5), no kernel noise (item 7), every config mistake at once (item 9).
The ACRB plan (item 4), grounded I2I (1), the fairness report (6), the API-request counter (8) and the labelling
sample (10) have their own files: test_byo_i2i.py, test_byo_fairness.py, test_byo_labels.py.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_files import report_file, failed_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "MPLBACKEND": "Agg", "ACRB_PROGRESS": "0"}


def cli(*args, cwd, timeout=500):
    "`acrb-report ARGS` from `cwd`; the CompletedProcess."
    return subprocess.run([sys.executable, "-m", "acrb_nb.report", *map(str, args)], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def papermill_parameters(ipynb: Path) -> dict:
    return json.loads(ipynb.read_text())["metadata"]["papermill"]["parameters"]


def manifest(cwd: Path) -> dict:
    (m,) = list((cwd / "runs").rglob("manifest.json"))
    return json.loads(m.read_text())


# ---------------------------------------------------------------------------------------------------- item 2
LIST_FORMS = [
    (["-p", "attributes", "religion"], ["religion"]),               # one name: not split into letters
    (["-p", "attributes", "culture,gender"], ["culture", "gender"]),  # comma-separated
    (["-y", "attributes: [culture]"], ["culture"]),                   # a YAML list
]


def test_acrb_list_parameter_one_rule(tmp_path, monkeypatch):
    """Each form reaches the template as the list it means. What the command line makes of each form is checked in this
    process (the parameters `acrb-report` hands the renderer, read by the one rule); one form is rendered whole, to check
    that the kernel receives and reads the list as the CLI does (a kernel per form would check the same thing three times)."""
    from acrb_nb import report
    from acrb_nb.checks import prepare_parameters
    given = []
    monkeypatch.setattr(report, "render_report", lambda t, **kw: given.append((t, kw)) or report.ReportResult("acrb", "sim", None, None, True))
    monkeypatch.chdir(tmp_path)
    for args, want in LIST_FORMS:
        assert report.main(["acrb", *args, "-p", "plan_only", "True"]) == 0
        t, kw = given[-1]
        assert prepare_parameters(t, parameters=kw["parameters"], paths_from=tmp_path)[0]["attributes"] == want, args
    monkeypatch.undo()
    r = cli("acrb", *LIST_FORMS[1][0], "-p", "plan_only", "True", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    nb = report_file(tmp_path / "reports", "acrb", "sim", ".ipynb")
    assert papermill_parameters(nb)["attributes"] == LIST_FORMS[1][1]
    assert "not in attribute set" not in nb.read_text()


def test_one_attribute_runs_and_audits_only_it(tmp_path):
    r = cli("acrb", "-p", "attributes", "religion", "-p", "n_base_prompts", "3", "-p", "n_boot", "100", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    import pandas as pd
    (s3,) = list((tmp_path / "runs").rglob("stage3_evaluation.parquet"))
    assert set(pd.read_parquet(s3).attribute_type) == {"religion", "neutral"}


def test_iat_and_fairness_lists_follow_the_same_rule(tmp_path):
    r = cli("iat", "-p", "dimensions", "gender", "-p", "plan_only", "True", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert papermill_parameters(report_file(tmp_path / "reports", "iat", "sim", ".ipynb"))["dimensions"] == ["gender"]
    assert "within-dimension value pairs of gender" in report_file(tmp_path / "reports", "iat", "sim").read_text()
    import numpy as np, pandas as pd
    g = np.random.default_rng(0)
    pd.DataFrame({"label": g.integers(0, 2, 80), "pred": g.integers(0, 2, 80), "race": g.choice(["a", "b"], 80),
                  "sex": g.choice(["f", "m"], 80)}).to_csv(tmp_path / "mine.csv", index=False)
    r = cli("fairness", "-p", "model", "mine", "-p", "preds", "mine.csv", "-p", "label_col", "label", "-p", "id_cols", "race,sex",
            "-p", "min_group_size", "5", "-p", "n_boot", "50", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert papermill_parameters(report_file(tmp_path / "reports", "fairness", "mine", ".ipynb"))["id_cols"] == ["race", "sex"]


# ---------------------------------------------------------------------------------------------------- item 3
def _bad_labels(folder: Path, run_dir: Path) -> Path:
    "A labels folder that looks right but is not: a spreadsheet turned its hex keys into numbers."
    (lab,) = list(run_dir.rglob("labelling"))
    csv = lab / "labels.csv"
    lines = csv.read_text().splitlines()
    head, rows = lines[0], lines[1:]
    bad = folder / "bad_labels"
    bad.mkdir()
    (bad / "sample.json").write_text((lab / "sample.json").read_text())
    cols = head.split(",")
    k, h = cols.index("key"), cols.index("human_label")
    out = [head]
    for i, row in enumerate(rows):
        cells = row.split(",")
        cells[k], cells[h] = str(1e15 + i), "present"
        out.append(",".join(cells))
    (bad / "labels.csv").write_text("\n".join(out) + "\n")
    return bad


def test_a_bad_labels_file_leaves_the_good_report_and_the_run_as_they_were(tmp_path):
    base = ["-p", "attributes", "religion", "-p", "n_base_prompts", "3", "-p", "n_boot", "100"]
    r = cli("acrb", *base, "-p", "export_labels", "12", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    html = report_file(tmp_path / "reports", "acrb", "sim")
    good, sessions = html.read_bytes(), manifest(tmp_path)["sessions"]
    assert [x["status"] for x in sessions] == ["finished"]
    bad = _bad_labels(tmp_path, tmp_path / "runs")
    r = cli("acrb", *base, "-p", "export_labels", "12", "-p", "labels", bad.name, cwd=tmp_path)
    assert r.returncode != 0
    attempt = failed_file(tmp_path / "reports", "acrb", "sim", ".ipynb")
    assert "not items of this run" in r.stderr or "not items of this run" in attempt.read_text()
    assert html.read_bytes() == good                                  # the published report is byte-identical
    after = [x["status"] for x in manifest(tmp_path)["sessions"]]
    assert after == ["finished", "finished"], after                   # the run's status did not change: no "failed"
    assert attempt.with_suffix(".html").exists()                      # the attempt is kept, with its error
    rows = [x for x in json.loads((tmp_path / "reports" / "index.json").read_text())["reports"] if x["model"] == "sim"]
    assert sorted(x["status"] for x in rows) == ["failed", "ok"]      # the labelled run's failed attempt beside the good report


# ---------------------------------------------------------------------------------------------------- item 4 (IAT)
def test_iat_plan_only_is_one_plan_in_peoples_numbers(tmp_path):
    r = cli("iat", "-p", "plan_only", "True", "-p", "model", "gpt-4o-mini-judge", "-p", "generator", "gpt-image-1",
            "-p", "usd_per_judge_call", "0.001", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    page = report_file(tmp_path / "reports", "iat", "gpt-4o-mini-judge").read_text()
    assert not re.search(r"\d\.\d{7,}", page), re.findall(r"\d\.\d{7,}", page)[:5]   # no float noise
    assert "$2.86" in page and "10 min" in page                     # cost and wall time for people
    assert page.count("Plan only") == 1 and "Design summary" not in page and "Effect sizes" not in page
    heads = {x["model"]: x for x in json.loads((tmp_path / "reports" / "index.json").read_text())["reports"]}["gpt-4o-mini-judge"]["headlines"]
    assert heads["cost_usd"] == 2.86 and heads["wall_hours"] == 0.17 and heads["judge_calls"] == 1134
    assert not (tmp_path / "runs").exists()                           # nothing was run


# ---------------------------------------------------------------------------------------------------- item 5
@pytest.mark.parametrize("study,args,needles", [
    ("toxicity", ["-p", "model", "nosuchmodel"], ["model='nosuchmodel' is not a known text_lm", "hub id", "smollm2-135m"]),
    ("toxicity", ["-p", "model", "smolm2-135m"], ["did you mean 'smollm2-135m'"]),
    ("acrb", ["-p", "model", "flx"], ["did you mean 'flux'"]),
    ("acrb", ["-p", "model", "flux", "-p", "mode", "i2i"], ["not a known image_editor"]),
    ("acrb", ["-p", "judge", "clip:clip-vit-b-23"], ["did you mean 'clip-vit-b-32'"]),
    ("iat", ["-p", "model", "gpt-4o-mini-jduge"], ["did you mean 'gpt-4o-mini-judge'"]),
])
def test_unknown_model_name_is_refused_before_anything_runs(tmp_path, study, args, needles):
    r = cli(study, *args, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    for n in needles: assert n in r.stderr, (n, r.stderr[-2000:])
    assert sorted(p.name for p in tmp_path.iterdir()) == []            # no report, no run folder, nothing


def test_a_local_model_folder_and_a_missing_input_path(tmp_path):
    (tmp_path / "models" / "mine").mkdir(parents=True)
    r = cli("toxicity", "-p", "model", "models/mine", cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "without config.json" in r.stderr
    r = cli("acrb", "-p", "labels", "nothing/labels.csv", cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "labels.csv does not exist" in r.stderr and str(tmp_path.resolve()) in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]


# ---------------------------------------------------------------------------------------------------- item 7
def test_no_kernel_noise_on_success_or_failure(tmp_path):
    tiny = ROOT / "tests" / "templates" / "tiny_report.ipynb"
    for args in ([], ["-p", "fail", "True", "-p", "model", "broken"]):
        r = cli(tiny, *args, cwd=tmp_path, timeout=120)
        assert "KeyboardInterrupt" not in r.stderr + r.stdout and "IPKernelApp" not in r.stderr + r.stdout, r.stderr


# ---------------------------------------------------------------------------------------------------- item 9
def test_config_mistakes_are_listed_at_once_with_close_matches(tmp_path):
    cfg = tmp_path / "audit.yaml"
    cfg.write_text("model: sim\nn_base_prompt: 4\nseed: zero\nexclude_policy_cell: false\nn_boot: 100\n")
    r = cli("acrb", "-f", cfg.name, cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    err = r.stderr
    assert "3 problems with the parameters of acrb.ipynb" in err
    assert "line 2: unknown parameter 'n_base_prompt'" in err and "did you mean 'n_base_prompts'" in err
    assert "line 4: unknown parameter 'exclude_policy_cell'" in err and "did you mean 'exclude_policy_cells'" in err
    assert "line 3: parameter 'seed'" in err and "expects int" in err
    cfg.write_text("model: sim\nseed: 1\nseed: 2\n")                  # a repeated key is a mistake too
    r = cli("acrb", "-f", cfg.name, cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "'seed' appears twice" in r.stderr
    assert not (tmp_path / "reports").exists()


# ---------------------------------------------------------------------------------------------------- issue 48
OCCUPATIONS = """name: occupations
neutral: {subject: a person}
dimensions:
  occupation:
    - {value: farmer, subject: a farmer, cues: [farm work clothes], i2i_edit: Make the person a farmer.}
    - {value: librarian, subject: a librarian, cues: [bookshelves], i2i_edit: Make the person a librarian.}
"""


def test_own_attribute_set_reaches_the_report_and_no_run_replaces_another(tmp_path):
    """Issue 48: `-p attribute_set my.yaml` with a new dimension renders an ACRB report from the CLI and through papermill;
    two sim audits with different planted configs, then a plan-only run, leave three reports in the index, none replaced."""
    (tmp_path / "occupations.yaml").write_text(OCCUPATIONS)
    (tmp_path / "planted.yaml").write_text("extends: planted_acrb.yaml\nattributes:\n  occupation:\n"
                                           "    farmer: {patterns: [farmer]}\n    librarian: {patterns: [librarian], p_erase: 0.4}\n")
    own = ["-p", "attribute_set", "occupations.yaml", "-p", "n_base_prompts", "3", "-p", "n_boot", "100"]
    for extra in ([], ["-p", "sim_config_file", "planted.yaml"], ["-p", "plan_only", "True"]):
        r = cli("acrb", *own, *extra, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
    rows = [x for x in json.loads((tmp_path / "reports" / "index.json").read_text())["reports"] if x["study"] == "acrb"]
    assert len(rows) == 3 and len({x["html"] for x in rows}) == 3 and all(x["status"] == "ok" for x in rows), rows
    assert sum(x["latest"] for x in rows) == 1                                      # the newest marked, none lost
    assert all((tmp_path / "reports" / x["html"]).exists() for x in rows)
    html = (tmp_path / "reports" / next(x["html"] for x in rows if x["parameters"].get("sim_config_file"))).read_text()
    assert "occupation:librarian" in html and "Simulator note" not in html        # the new dimension, planted by the user
    r = subprocess.run([sys.executable, "-m", "papermill", str(ROOT / "nbs" / "acrb.ipynb"), "out.ipynb", "-p", "attribute_set",
                        "occupations.yaml", "-p", "n_base_prompts", "2", "-p", "n_boot", "100", "-p", "plan_only", "True"],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "occupation" in (tmp_path / "out.ipynb").read_text()
