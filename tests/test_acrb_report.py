"""The ACRB report and pipeline end to end (issues 18.5, 18.7, 19): galleries redacted in the rendered HTML by default
and not with `redact=False`; judge-only and corrected erasure side by side once a labels file is given; a plan-only
report (also from the `acrb-report` command line) that makes no model call, counted at a loopback server; a run whose
every call fails (401, connection refused) stopping with the count and the errors, a 'failed' manifest and no metrics;
and the template run by papermill from another working directory."""
import json, os, socket, subprocess, sys
from pathlib import Path

import pandas as pd
import pytest
from report_files import report_file

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "nbs" / "acrb.ipynb"
from reliability_helpers import Loopback  # a loopback API that refuses every key and counts the requests

SCRIPT = Path(sys.executable).parent / "acrb-report"
pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def loopback():
    s = Loopback()
    yield s
    s.close()


def figures(html: str) -> list:
    "The gallery figures of a rendered report: key, domain, redaction reason and the inlined PNG (base64)."
    from html.parser import HTMLParser
    out = []
    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "figure" and "acrb-thumb" in (a.get("class") or ""):
                out.append(dict(key=a.get("data-key"), domain=a.get("data-domain"), redacted=a.get("data-redacted") or "", b64=None))
            elif tag == "img" and out and out[-1]["b64"] is None and (a.get("src") or "").startswith("data:image/png;base64,"):
                out[-1]["b64"] = a["src"].split(",", 1)[1]
    P().feed(html)
    return out


def render(tmp_path, name, **params):
    from acrb_nb.report import render_report
    r = render_report(TEMPLATE, parameters=params, out_dir=tmp_path / name)
    assert r.ok, r.error
    return r.html.read_text()


def test_gallery_redaction(tmp_path):
    from acrb_nb.acrb.gallery import SENSITIVE_DOMAINS, png_b64, thumbnail
    run_dir = tmp_path / "run"
    params = dict(model="sim", attributes=["culture"], domains=["sexual_wellness", "body_appearance"], n_base_prompts=4,
                  n_boot=200, judge2=None, run_dir=str(run_dir))
    html = render(tmp_path, "on", **params)
    s3 = pd.read_parquet(run_dir / "stage3_evaluation.parquet")
    img, outcome = dict(zip(s3.key, s3.image)), dict(zip(s3.key, s3.final_outcome))
    figs = [f for f in figures(html) if isinstance(img.get(f["key"]), str)]
    sharp = lambda f: png_b64(thumbnail(run_dir / img[f["key"]]))
    sensitive = [f for f in figs if f["domain"] in SENSITIVE_DOMAINS]
    plain = [f for f in figs if f["domain"] not in SENSITIVE_DOMAINS and outcome[f["key"]] != "refused_safety_filter"]
    assert sensitive and plain, "the galleries must show images from a sensitive and from another domain"
    for f in sensitive:
        assert f["redacted"].startswith("sensitive domain") and f["b64"] != sharp(f)
        assert f["b64"] == png_b64(thumbnail(run_dir / img[f["key"]], blur=12))
    assert all(f["redacted"] == "" and f["b64"] == sharp(f) for f in plain)
    assert "Gallery redaction:</strong> on" in html
    html_off = render(tmp_path, "off", **params, redact=False)    # the same run, resumed: every image as generated
    off = [f for f in figures(html_off) if isinstance(img.get(f["key"]), str)]
    assert off and all(f["redacted"] == "" and f["b64"] == sharp(f) for f in off)
    assert any(f["domain"] in SENSITIVE_DOMAINS for f in off) and "redaction off" in html_off


def test_labels_give_corrected_erasure_side_by_side(tmp_path):
    from acrb_nb.acrb.pipeline import run_acrb
    run_dir = tmp_path / "run"
    params = dict(model="sim", judge="sim-differential", attributes=["culture"], n_base_prompts=None, n_boot=200, judge2=None,
                  run_dir=str(run_dir))
    html = render(tmp_path, "a", **params, export_labels=180)
    assert "judge-reported, uncorrected (no human labels)" in html and "Cite the judge-only column" in html
    folder = run_dir / "labelling"
    sheet = pd.read_csv(folder / "labels.csv", dtype=str, keep_default_na=False)
    assert len(sheet) == 180 and (sheet.human_label == "").all() and "judge_verdict" not in sheet   # blind
    res = run_acrb("sim", judge="sim-differential", attributes=["culture"], run_dir=str(run_dir), analysis={"n_boot": 200})
    assert res.run.store.counters()["calls"] > 0 and res.correction.n_labels == 0                      # resumed, nothing labelled yet
    truth = dict(zip(res.stage3.key, res.stage3.metadata.map(lambda m: m["sim"]["cue"])))             # what a careful labeller sees
    sheet["human_label"] = sheet.key.map(truth)
    sheet.to_csv(folder / "labels.csv", index=False)
    html2 = render(tmp_path, "b", **params, labels=str(folder))
    assert "Cite the corrected column" in html2 and "corrected with the human labels" in html2
    jc = json.loads((run_dir / "acrb_summary.json").read_text())["judge_correction"]
    assert jc["n_labels"] == 180 and all(e["cite"] == "corrected" for e in jc["erasure"].values())
    from acrb_nb.acrb.simulate import sim_expected
    planted = sim_expected(res.stage3).erased.drop("neutral")                                    # the planted p_erase, domains included
    cult = jc["delta_erasure"]["culture"]
    assert cult["judge_only"] > cult["corrected"] and cult["corrected_ci"][0] <= planted.max() - planted.min() <= cult["corrected_ci"][1]


def test_plan_only_makes_no_model_call(tmp_path, loopback):
    env = {**os.environ, "OPENAI_BASE_URL": loopback.url, "OPENAI_API_KEY": "dummy-key-for-the-loopback"}
    out = tmp_path / "reports"
    r = subprocess.run([str(SCRIPT), "acrb", "-p", "model", "gpt-image-1", "-p", "plan_only", "True", "--out", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    html = report_file(out, "acrb", "gpt-image-1").read_text()
    assert "generator calls" in html and "human labels per value" in html and "OPENAI_IMAGE_PRICES" in html
    # one "not run" notice where the report stops; the later sections are not published (issue 28, item 4)
    assert html.count("plan_only=True: not run") == 1 and "Stage II: outcomes" not in html
    assert loopback.count == 0
    from acrb_nb.report import render_report                      # the Python path too, with the 401 server ready to answer
    r2 = render_report(TEMPLATE, parameters=dict(model="gpt-image-1", plan_only=True), out_dir=tmp_path / "api")
    assert r2.ok, r2.error
    assert loopback.count == 0


def _closed_port() -> int:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    return port


@pytest.mark.parametrize("endpoint", ["401", "refused"])
def test_every_call_failing_stops_without_metrics(tmp_path, loopback, monkeypatch, endpoint):
    from acrb_nb.acrb.pipeline import run_acrb, AllCallsFailed
    from acrb_nb.runner import RetryPolicy
    url = loopback.url if endpoint == "401" else f"http://127.0.0.1:{_closed_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url); monkeypatch.setenv("OPENAI_API_KEY", "dummy-key-for-the-loopback")
    run_dir = tmp_path / "run"
    with pytest.raises(AllCallsFailed) as e:
        run_acrb("gpt-image-1", attributes=["gender"], n_base_prompts=1, run_dir=str(run_dir),
                 execution={"retry": RetryPolicy(base_delay=0.01, max_delay=0.05)})  # the refused connection is retried (5 times), quickly
    msg = str(e.value)
    assert "all 4 generation calls failed" in msg and "no metrics were written" in msg and "retry_failed=True" in msg
    assert ("401" in msg and "Incorrect API key" in msg) if endpoint == "401" else ("Connection" in msg)
    if endpoint == "401": assert loopback.count == 4            # a 401 is not retried
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["sessions"][-1]["status"] == "failed" and not (run_dir / "acrb_summary.json").exists()
