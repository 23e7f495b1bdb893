"""Find a rendered report as a user does: through `reports/index.json`, not by guessing its file name.

A report's file names its run (`<model>` for a template's defaults, `<model>-<hash>` for other parameters: see
`report.report_stem`), so tests look a report up by study and model in the index: the newest one, or its newest
failed attempt.
"""
import json
from pathlib import Path


def _rows(reports: Path, study: str, model: str) -> list:
    rows = json.loads((Path(reports) / "index.json").read_text())["reports"]
    found = [r for r in rows if r["study"] == study and str(r["model"]) == model]
    assert found, f"no {study}/{model} report in {reports}/index.json: {[(r['study'], r['model']) for r in rows]}"
    return sorted(found, key=lambda r: str(r.get("executed") or ""), reverse=True)


def report_file(reports, study: str, model: str, suffix: str = ".html") -> Path:
    "The newest good report of `model` (its .html, or .ipynb with suffix='.ipynb')."
    ok = [r for r in _rows(reports, study, model) if r["status"] == "ok"]
    assert ok, f"{study}/{model} has no good report in {reports}"
    return (Path(reports) / ok[0]["ipynb"]).with_suffix(suffix)


def failed_file(reports, study: str, model: str, suffix: str = ".html") -> Path:
    "The newest failed attempt of `model`: a failed report, or the attempt noted beside a good one."
    for r in _rows(reports, study, model):
        if r["status"] == "failed": return (Path(reports) / r["ipynb"]).with_suffix(suffix)
        if r.get("last_attempt"): return (Path(reports) / r["last_attempt"]["ipynb"]).with_suffix(suffix)
    raise AssertionError(f"{study}/{model} has no failed attempt in {reports}")
