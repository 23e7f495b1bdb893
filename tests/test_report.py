"""End-to-end tests of the `acrb-report` command line (papermill runs as a real subprocess).

Each CLI run starts a kernel (~2-4 s). The template is tests/templates/tiny_report.ipynb.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from report_files import report_file, failed_file

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).parent
TINY = HERE / "templates" / "tiny_report.ipynb"
SCRIPT = Path(sys.executable).parent / "acrb-report"
FAKE_KEY = "sk-acrbtest-" + "Q7x2Lm9Pz4" * 3  # provider-shaped, never a real key


def run_cli(*args, cwd, env=None, script=False):
    "Run `acrb-report` (console script) or `python -m acrb_nb.report` and return the CompletedProcess."
    cmd = [str(SCRIPT)] if script else [sys.executable, "-m", "acrb_nb.report"]
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    return subprocess.run(cmd + [str(a) for a in args], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=240)


def index_rows(out):
    return {(r["study"], r["model"]): r for r in json.loads((out / "index.json").read_text())["reports"]}


def files_containing(root, needle):
    return [p for p in Path(root).rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_import_is_lazy():
    code = "import sys, acrb_nb.report; print(any(m in sys.modules for m in ('papermill', 'nbconvert', 'pandas')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_help(tmp_path):
    r = run_cli("--help", cwd=tmp_path)
    assert r.returncode == 0 and "--index-only" in r.stdout and "OPENAI_API_KEY" in r.stdout


def test_success(tmp_path):
    out = tmp_path / "reports"
    script = SCRIPT.exists()  # exercise the console script when it is installed, `python -m` otherwise
    r = run_cli(TINY, "-p", "model", "sim", "-p", "n", "4", "-y", "groups: [x, y]", "--out", out, cwd=tmp_path,
                script=script)
    assert r.returncode == 0, r.stderr
    ipynb, html = report_file(out, "tiny_report", "sim", ".ipynb"), report_file(out, "tiny_report", "sim")
    assert str(html) in r.stdout                                          # the command says where it is
    assert ipynb.exists() and html.exists() and (out / "index.html").exists()
    assert (tmp_path / "tiny_report_items.csv").exists()                 # the template ran in the user's folder
    assert not (TINY.parent / "tiny_report_items.csv").exists()          # not in the template's
    nb = json.loads(ipynb.read_text())
    assert nb["metadata"]["papermill"]["parameters"] == {"model": "sim", "n": 4, "groups": ["x", "y"]}
    page = html.read_text()
    assert "n_items" in page and "echo_env" not in page  # outputs shown, code hidden
    row = index_rows(out)[("tiny_report", "sim")]
    assert row["status"] == "ok" and row["headlines"] == {"n_items": 4, "mean_score": 2.25, "model": "sim"}
    assert row["html"] == html.relative_to(out).as_posix() and row["html"] in (out / "index.html").read_text()


def test_config_and_show_input(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("model: cfg\nn: 2\nscale: 3.0\n")
    out = tmp_path / "reports"
    r = run_cli(TINY, "-f", cfg, "-p", "n", "5", "--show-input", "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    row = index_rows(out)[("tiny_report", "cfg")]
    assert row["parameters"] == {"model": "cfg", "n": 5, "scale": 3.0}  # -p wins over the config file
    assert "echo_env" in report_file(out, "tiny_report", "cfg").read_text()


def test_failing_report(tmp_path):
    out = tmp_path / "reports"
    r = run_cli(TINY, "-p", "model", "broken", "-p", "fail", "True", "--out", out, cwd=tmp_path)
    assert r.returncode != 0
    partial = failed_file(out, "tiny_report", "broken", ".ipynb")  # a failed attempt lands beside the report, never over it
    assert partial.name.endswith(".failed.ipynb") and partial.with_suffix(".html").exists()
    assert not Path(str(partial).replace(".failed.ipynb", ".html")).exists()
    assert "partial executed notebook" in r.stderr and str(partial) in r.stderr
    assert "tiny_report failed on purpose" in r.stderr
    assert "An Exception was encountered" in partial.read_text()
    row = index_rows(out)[("tiny_report", "broken")]
    assert row["status"] == "failed" and "RuntimeError" in row["error"]


def test_bad_parameters(tmp_path):
    out = tmp_path / "reports"
    r = run_cli(TINY, "-p", "steps", "3", "--out", out, cwd=tmp_path)
    assert r.returncode == 2 and "unknown parameter" in r.stderr and "n=3" in r.stderr
    r = run_cli(TINY, "-p", "n", "three", "--out", out, cwd=tmp_path)
    assert r.returncode == 2 and "expects int" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["-p", "model", FAKE_KEY],  # the value of a secret environment variable
    ["-y", f"groups: [a, '{FAKE_KEY}']"],  # ... inside a list
    ["-p", "api_key", "whatever"],  # a credential-like name
    ["-p", "openai_token", "whatever"],
])
def test_secret_parameter_refused(tmp_path, args):
    out = tmp_path / "reports"
    r = run_cli(TINY, *args, "--out", out, cwd=tmp_path, env={"ACRB_TEST_API_KEY": FAKE_KEY})
    assert r.returncode != 0
    assert "environment" in r.stderr and "OPENAI_API_KEY" in r.stderr
    assert FAKE_KEY not in r.stdout + r.stderr
    assert files_containing(tmp_path, FAKE_KEY) == []
    assert not out.exists()  # refused before anything was written


def test_leaked_secret_is_redacted(tmp_path):
    out = tmp_path / "reports"
    r = run_cli(TINY, "-p", "model", "leaky", "-p", "echo_env", "ACRB_TEST_API_KEY", "--out", out, cwd=tmp_path,
                env={"ACRB_TEST_API_KEY": FAKE_KEY})
    assert r.returncode == 0, r.stderr
    assert "ACRB_TEST_API_KEY" in r.stderr and "redacted" in r.stderr
    assert files_containing(tmp_path, FAKE_KEY) == []
    assert "***REDACTED***" in report_file(out, "tiny_report", "leaky").read_text()
    assert index_rows(out)[("tiny_report", "leaky")]["redacted"] == ["ACRB_TEST_API_KEY"]
    from acrb_nb.report import scan_for_secrets
    assert scan_for_secrets(out, env={"ACRB_TEST_API_KEY": FAKE_KEY}) == []


def _project(tmp_path, studies):
    "A throwaway project: settings.ini and nbs/<study>.ipynb copies of the tiny template ({study: fail?})."
    (tmp_path / "settings.ini").write_text("[DEFAULT]\nlib_name = x\nnbs_path = nbs\n")
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    text = TINY.read_text().replace('model = \\"dummy\\"', 'model = \\"sim\\"')  # a model acrb and iat know (checked first)
    assert 'model = \\"sim\\"' in text
    for study, fail in studies.items():
        (nbs / f"{study}.ipynb").write_text(text.replace("fail = False", f"fail = {fail}"))
    return nbs


def test_all(tmp_path):
    nbs = _project(tmp_path, {"acrb": False, "iat": True, "toxicity": False, "other": False})
    tox = nbs / "toxicity.ipynb"  # a study whose model does not resolve: refused, and the others still render
    tox.write_text(tox.read_text().replace('model = \\"sim\\"', 'model = \\"nosuchmodel\\"'))
    r = run_cli("--all", cwd=tmp_path)
    assert r.returncode == 1, r.stderr  # iat fails on purpose, toxicity is refused
    assert "toxicity" in r.stderr and "nosuchmodel" in r.stderr
    out = tmp_path / "reports"
    rows = index_rows(out)
    assert set(rows) == {("acrb", "sim"), ("iat", "sim")}  # only the known studies; `other` is not one
    assert rows[("acrb", "sim")]["status"] == "ok" and rows[("iat", "sim")]["status"] == "failed"
    assert (out / "acrb" / "sim.html").exists() and (out / "iat" / "sim.failed.ipynb").exists()
    assert not (out / "toxicity").exists()


def test_study_name_and_empty_all(tmp_path):
    _project(tmp_path, {"acrb": False})
    sub = tmp_path / "nbs"  # a study name resolves from any folder under settings.ini
    r = run_cli("acrb", "-p", "model", "sim", "--out", tmp_path / "reports", cwd=sub)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "reports" / "acrb" / "sim.html").exists()
    r = run_cli("toxicity", cwd=tmp_path)
    assert r.returncode == 2 and "templates in" in r.stderr and "acrb" in r.stderr

    (tmp_path / "nbs" / "acrb.ipynb").unlink()
    r = run_cli("--all", "--out", tmp_path / "empty", cwd=tmp_path)
    assert r.returncode == 0 and "empty index" in r.stdout
    assert json.loads((tmp_path / "empty" / "index.json").read_text())["reports"] == []
    assert "No reports yet" in (tmp_path / "empty" / "index.html").read_text()


def test_index_only(tmp_path):
    r = run_cli("--index-only", "--out", tmp_path / "reports", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "reports" / "index.html").exists()
