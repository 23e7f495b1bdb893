"""Reports in a real browser (issue 49 items 1 and 2): every published HTML loads nothing but itself and files beside
it, and a report whose every user-given field holds hostile text shows that text as text and runs nothing.

- The published reports (`reports/**/*.html`, the index included) are opened from disk in Debian's headless Chromium;
  Chromium's network log must hold no request that is not a file, data: or blob: URL (no require.js, MathJax, Mermaid
  or widget script from a CDN), and nothing may run.
- One report per study is rendered from an empty folder with the hostile corpus of tests/hostile.py in every field a
  user controls — fairness: the groups, the dataset's name and what a positive label means; ACRB: an attribute set and
  base prompts of one's own (values, cues, scenes, a domain); IAT: a words file of one's own; toxicity: a texts table of
  one's own, its name and licence; compare: the display names — and each page must show every string literally (NUL as U+FFFD), hold no
  script URL and run nothing (`hostile.check_page`). A report's tables cut long cells, so the 100,000-character line
  goes where prose shows it whole (the dataset's name).
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import hostile
from hostile import HOSTILE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[1]
READY = "return document.readyState === 'complete'"
SHORT = {k: v for k, v in HOSTILE.items() if k != "long_line"}
ALL = " ".join(SHORT.values())                                   # fields that show one value: every string at once


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    drv = hostile.chromium(tmp_path_factory.mktemp("profile"))
    yield drv
    drv.quit()


def test_published_reports_load_nothing_from_the_network(browser):
    pages = sorted((ROOT / "reports").rglob("*.html"))
    assert len(pages) >= 7 and (ROOT / "reports" / "index.html") in pages, pages   # ACRB T2I and I2I, toxicity, fairness,
    # IAT, the comparison, the index (make report)
    for page in pages:
        hostile.check_page(browser, page, ready=READY, what=str(page.relative_to(ROOT)))
        html = page.read_text(encoding="utf-8", errors="replace")
        assert "cdnjs" not in html and "require.min.js" not in html and "MathJax" not in html, page
    print(f"REPORTS-OFFLINE {len(pages)} published pages: 0 requests that are not files")


def _render(cwd: Path, study: str, **params):
    from acrb_nb.report import render_report, find_nbs
    r = render_report(find_nbs(ROOT) / f"{study}.ipynb", parameters=params, out_dir=cwd / "reports", cwd=cwd, paths_from=cwd)
    assert r.ok, r.error
    return r.html


@pytest.fixture(scope="module")
def hostile_reports(tmp_path_factory):
    "One report per study, every user-given field hostile: {study: (html, strings it must show)}."
    import yaml
    from acrb_nb.acrb.pipeline import run_acrb, model_ref
    from acrb_nb.core import data_path
    cwd = tmp_path_factory.mktemp("reports")
    out = {}
    # fairness: hostile groups, dataset name (with the long line) and positive name
    g = np.random.default_rng(0)
    names = list(SHORT.values())
    n = 12 * len(names)
    pd.DataFrame({"y": g.integers(0, 2, n), "p": g.integers(0, 2, n), "grp": np.repeat(names, 12)}).to_csv(cwd / "mine.csv", index=False)
    out["fairness"] = (_render(cwd, "fairness", model="mine", preds="mine.csv", label_col="y", pred_col="p", id_cols="grp",
                               min_group_size=5, n_boot=50, dataset=HOSTILE["long_line"] + " " + SHORT["script"],
                               positive_name=SHORT["img_onerror"]), [*names, HOSTILE["long_line"]])
    # ACRB: one's own attribute set and base prompts: a domain per hostile string (the report lists every domain), and the
    # first scene, whose variants the report shows in full, holds the short strings that fit a table cell of 200 characters
    vals = [{"value": f"v{i}", "subject": f"a person{i}", "check_article": False, "cues": [ALL], "i2i_edit": "Make the person x."}
            for i in range(2)]
    (cwd / "attrs.yaml").write_text(yaml.safe_dump({"name": "hostile", "neutral": {"subject": "a person"},
                                                    "dimensions": {"mine": vals}}))
    first = " ".join(SHORT[k] for k in ("comment_close", "comment_script", "close_script", "script", "img_onerror", "nul"))
    scenes = [{"id": f"H{i}", "domain": dom, "template": f"{{subject}} near sign {i}: {first if i == 0 else 'plain'}"}
              for i, dom in enumerate(SHORT.values())]
    (cwd / "prompts.yaml").write_text(yaml.safe_dump({"prompts": scenes}))
    out["acrb"] = (_render(cwd, "acrb", attribute_set="attrs.yaml", base_prompts="prompts.yaml", n_boot=100, judge2=None),
                   [*SHORT.values(), f"near sign 0: {first}"])
    # IAT: one's own words (a report shows an example instruction: every word holds all)
    (cwd / "words.yaml").write_text(yaml.safe_dump({"positive_words": [f"good{i} {ALL}" for i in range(3)],
                                                    "negative_words": [f"bad{i} {ALL}" for i in range(3)]}))
    out["iat"] = (_render(cwd, "iat", words="words.yaml", dimensions="gender", pairs_per_combo=1, n_boot=100, n_perm=100), [ALL])
    # toxicity: one's own texts (each a hostile string), with a hostile name, licence and identity column (a cheap model, no IG)
    texts = [*SHORT.values()] * 4
    pd.DataFrame({"text": texts, "label": ["toxic", "fine"] * (len(texts) // 2), "grp": [1, 0] * (len(texts) // 2)}
                 ).to_csv(cwd / "texts.csv", index=False)
    out["toxicity"] = (_render(cwd, "toxicity", model="tiny-gpt2", select=False, ig_rows=0, dataset="texts.csv", text_col="text",
                               label_col="label", positive_label="toxic", id_cols="grp", dataset_name=ALL, license=SHORT["img_onerror"]),
                       [ALL, SHORT["img_onerror"]])
    # compare: hostile display names of two runs
    runs = []
    for k in "ab":
        run_acrb(model_ref("sim", "t2i", config=str(data_path("sim", f"compare_{k}.yaml"))), attributes=["religion"],
                 n_base_prompts=4, run_dir=cwd / "runs" / k, analysis={"n_boot": 100, "n_perm": 100})
        runs.append(str(cwd / "runs" / k))
    shown = [SHORT["close_script"], SHORT["quotes"]]
    out["compare"] = (_render(cwd, "compare", runs=runs, names=shown, n_boot=100, n_perm=200), shown)
    return out


@pytest.mark.budget(cpu=150, why="five report renders (a kernel and the study's imports each) and a browser: the only test "
                                 "that puts hostile text through every template into published HTML")
@pytest.mark.parametrize("study", ["fairness", "acrb", "iat", "toxicity", "compare"])
def test_hostile_text_in_a_report_is_shown_as_text_and_runs_nothing(hostile_reports, browser, study):
    page, strings = hostile_reports[study]
    got = hostile.check_page(browser, page, strings, ready=READY, what=f"{study} report")
    print(f"REPORT-HOSTILE {study}: {len(strings)} hostile strings shown as text, nothing ran ({got['chars']:,} characters)")
