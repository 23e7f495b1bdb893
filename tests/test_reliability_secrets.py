"""Secrets: with recognisable dummy API keys in the environment, every report template runs against the local servers
(the OpenAI and Gemini adapters and judges read the keys and send them), then every file under the run and report
folders — executed notebooks, HTML, manifests, specs, stores, parquet, logs — is scanned for the keys: 0 hits, and 0
redactions were needed (`render_report` masks a leaked key; needing to would still be a leak). Keys passed as
parameters — to a report, to a run spec — are refused with an error that says to use the environment.

Templates are discovered in nbs/ (acrb, toxicity, fairness, iat); a template without an entry in CONFIGS runs with
its own defaults (a small offline configuration), still with the keys in the environment. They run from the
repository root, where a user who cloned the project starts (`test_templates.py` runs them from an empty folder);
every output goes to the test's temporary folder.
"""
import json
from pathlib import Path

import pytest

from acrb_nb.testing import start_server_process, stop_server_process
from reliability_helpers import DUMMY_ENV, DUMMY_GOOGLE_KEY, DUMMY_OPENAI_KEY, ROOT, server_env

AREA = "secrets"
pytestmark = pytest.mark.timeout(900)
STUDIES = ("acrb", "toxicity", "fairness", "iat")


def CONFIGS(runs):
    "Report runs per template: (label, parameters) — the API runs reach the fake servers through the SDKs' env variables."
    return {
        "acrb": [("gpt-image-1 t2i + gpt-4o-mini judge",
                  dict(model="gpt-image-1", attributes=["gender"], n_base_prompts=3, judge="gpt-4o-mini-judge", judge2=None,
                       n_boot=200, run_dir=str(runs / "acrb-openai"))),
                 ("gemini-2.5-flash-image i2i + gemini judge",
                  dict(model="gemini-2.5-flash-image", mode="i2i", attributes=["gender"], n_base_prompts=2,
                       judge="gemini-2.5-flash-judge", judge2=None, n_boot=200, run_dir=str(runs / "acrb-gemini")))],
        "toxicity": [("gpt-4o-mini", dict(model="gpt-4o-mini"))],
        "iat": [("gpt-4o-mini-judge", dict(model="gpt-4o-mini-judge", dimensions=["gender"], words=4, pairs_per_combo=2,
                                           n_boot=200, n_perm=200))],
        "fairness": [("defaults", {})],
    }


def _hits(paths):
    "Files holding a dummy key in any form `scan_for_secrets` knows (raw, JSON- or HTML-escaped), plus a raw byte search."
    from acrb_nb.report import scan_for_secrets
    hits = scan_for_secrets(paths, env=DUMMY_ENV)
    files = [p for root in paths for p in Path(root).rglob("*") if p.is_file()]
    raw = [str(p) for p in files if any(k.encode() in p.read_bytes() for k in (DUMMY_OPENAI_KEY, DUMMY_GOOGLE_KEY))]
    return hits, raw, len(files)


@pytest.mark.budget(cpu=60, why="every study's report rendered against the fake API servers with keys in the environment")
@pytest.mark.slow
def test_report_templates_leak_no_key(run_tmp, reliability, monkeypatch):
    from acrb_nb.report import render_report, template_parameters
    logs = run_tmp / "server-logs"
    logs.mkdir()
    oai, oai_url = start_server_process("openai", log_path=logs / "openai.jsonl", image_size=(64, 64),
                                        hooks="reliability_helpers:hooks", env=server_env())
    gem, gem_url = start_server_process("gemini", log_path=logs / "gemini.jsonl", image_size=(64, 64),
                                        hooks="reliability_helpers:hooks", env=server_env())
    runs, out = run_tmp / "runs", run_tmp / "reports"
    done, failed = [], []
    try:
        for k, v in {**DUMMY_ENV, "OPENAI_BASE_URL": oai_url, "GOOGLE_GEMINI_BASE_URL": gem_url, "ACRB_PROGRESS": "0"}.items():
            monkeypatch.setenv(k, v)
        for study in STUDIES:
            tpl = ROOT / "nbs" / f"{study}.ipynb"
            if not tpl.exists(): continue
            specs = template_parameters(tpl)
            for label, params in CONFIGS(runs)[study]:
                params = {k: v for k, v in params.items() if k in specs}  # templates that landed later may differ
                if "run_dir" in specs and "run_dir" not in params: params["run_dir"] = str(runs / f"{study}-{len(done)}")
                if "out" in specs and not params.get("out"): params["out"] = str(runs / f"{study}-{len(done)}" / "out.csv")
                r = render_report(tpl, parameters=params, out_dir=out / str(len(done) + len(failed)), cwd=ROOT)
                (done if r.ok else failed).append((study, label, r.error))
                assert r.redacted == (), f"{study} ({label}): the report printed {r.redacted} and had to be redacted"
    finally:
        stop_server_process(oai); stop_server_process(gem)
    assert not failed, f"report runs failed: {failed}"
    from acrb_nb.testing import read_log
    n_calls = len(read_log(logs / "openai.jsonl")) + len(read_log(logs / "gemini.jsonl"))
    assert n_calls > 0, "no template reached the local servers"
    hits, raw, n_files = _hits([runs, out, logs])
    assert hits == [] and raw == [], f"API keys found in {hits or raw}"
    kinds = {p.suffix for p in list(runs.rglob("*")) + list(out.rglob("*")) if p.is_file()}
    assert {".ipynb", ".html", ".json", ".sqlite", ".parquet"} <= kinds, kinds
    reliability.add(AREA, templates=len(done), template_names={s for s, _, _ in done}, files=n_files, hits=len(hits) + len(raw),
                    redacted=0)


@pytest.mark.parametrize("params", [
    {"model": DUMMY_OPENAI_KEY},                              # a key as a value
    {"attributes": ["gender", DUMMY_GOOGLE_KEY]},             # inside a list
    {"api_key": "whatever"},                                  # a credential-like name
    {"openai_api_key": "x" * 20},
], ids=["value", "in-list", "api_key", "openai_api_key"])
@pytest.mark.parametrize("study", ["acrb", "fairness"])
def test_key_parameters_refused(study, params, tmp_path, reliability, monkeypatch):
    from acrb_nb.report import render_report, SecretParameterError
    for k, v in DUMMY_ENV.items(): monkeypatch.setenv(k, v)
    out = tmp_path / "reports"
    with pytest.raises(SecretParameterError) as e:
        render_report(ROOT / "nbs" / f"{study}.ipynb", parameters=params, out_dir=out)
    msg = str(e.value)
    assert "environment" in msg and "OPENAI_API_KEY" in msg
    assert DUMMY_OPENAI_KEY not in msg and DUMMY_GOOGLE_KEY not in msg
    assert not out.exists(), "refused before anything was written"
    reliability.add(AREA, refused=1, refusal_cases=1)


def test_key_parameters_refused_by_run_specs(tmp_path, reliability, monkeypatch):
    "Pipelines write their parameters into spec.json: a key there is refused before any folder is made."
    from acrb_nb.core import RunSpec
    from acrb_nb.acrb.pipeline import run_acrb
    for k, v in DUMMY_ENV.items(): monkeypatch.setenv(k, v)
    cases = [lambda: run_acrb("sim", attributes=["gender"], n_base_prompts=1, source_dir=DUMMY_GOOGLE_KEY,
                              run_dir=str(tmp_path / "b")),
             lambda: RunSpec("iat", "gpt-4o-mini-judge", {"judge_kwargs": {"api_key": DUMMY_OPENAI_KEY}}),
             lambda: RunSpec("toxicity", "gpt-4o-mini", {"note": f"key={DUMMY_OPENAI_KEY}"})]
    for f in cases:
        with pytest.raises(ValueError) as e: f()
        assert "environment" in str(e.value) and DUMMY_OPENAI_KEY not in str(e.value) and DUMMY_GOOGLE_KEY not in str(e.value)
        reliability.add(AREA, refused=1, refusal_cases=1)
    assert not any(tmp_path.rglob("spec.json"))
