"""Hostile text for every page acrb_nb writes, and one browser check that a page survives it.

Scraped web text, model answers and hand-edited CSV cells can hold anything. A page that shows them must stay a
page: interactive, the text shown as text, nothing run. This module gives the tests

- `HOSTILE`: a corpus of strings (name -> string) that break naive pages — script / comment / CDATA openers and
  closers, an event handler, a `javascript:` URL, template syntax, U+2028 / U+2029, NUL, an RTL override, quotes and
  backslashes, a 100,000-character line; `URLS`: values for fields that a page could turn into a link or an image;
- `shown(s)`: the DOM text a page must show for `s` (acrb_nb's rule: the string itself, with NUL as U+FFFD, since
  HTML text cannot hold NUL: the parser drops it or replaces it);
- `chromium(...)`: one headless Chromium (Debian's chromium + chromedriver, no network) that records alerts, CSP
  violations, console errors and requests from the first script of every document on;
- `check_page(drv, path, strings)`: open a page and assert that it becomes ready, that each string's `shown` form is
  in its text, and that nothing ran (`window.__pwned` undefined, no alert, no CSP violation, no console error, no
  `javascript:` link or source, no request that is not a file, data: or blob: URL). It returns the figures so a test
  can go on to drive the page (filters, keys) in the same session.

Use it for any HTML: the run viewer and labelling page (tests/test_pages.py), the reports, the comparison page.
"""
import json
import os
import shutil
import time
from pathlib import Path

import pytest

# The order matters: `-->` ends the HTML parser's escaped script state, so it comes first; a `<!--<script>` after it is
# never healed later in a page (each builder writes the items in this order), as in a page with one such text.
HOSTILE = {
    "comment_close": "-->",
    "comment_script": "<!--<script>",
    "close_script": "</script>",
    "script": "<script>window.__pwned=1</script>",
    "cdata_open": "<![CDATA[",
    "cdata_close": "]]>",
    "img_onerror": '<img src=x onerror="window.__pwned=1">',
    "js_url": "javascript:window.__pwned=1",
    "templates": "{{window.__pwned=1}} ${window.__pwned=1} {% raw %}",
    "line_separators": "before\u2028between\u2029after",
    "nul": "nul\x00byte",
    "rtl_override": "\u202eevil.exe \u202cthen plain",
    "quotes": "it's \"quoted\" \\ back\\slash \\u003c `tick`",
    "long_line": "".join(f"{i:05d}{'.' * 92}<>&" for i in range(1_000)),   # 100,000 characters, no line break
}
assert len(HOSTILE["long_line"]) == 100_000
# values for fields that a page could turn into a URL (an image path, a link)
URLS = ("javascript:window.__pwned=1", "JaVaScRiPt:window.__pwned=1", " javascript:window.__pwned=1", "java\tscript:window.__pwned=1",
        "data:text/html,<script>window.__pwned=1</script>", "https://example.invalid/x.png", "//example.invalid/x.png")
# every short string in one (titles, model names: fields with a single value per page)
ALL_SHORT = " ".join(v for k, v in HOSTILE.items() if k != "long_line")
LOCAL = ("file:", "data:", "blob:", "about:", "chrome:", "devtools:")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def shown(s) -> str:
    "The DOM text a page shows for `s`: `s` itself, NUL as U+FFFD."
    return str(s).replace("\x00", "\ufffd")


def need_browser():
    "Skip (fail under CI=true) without chromium, chromedriver or selenium, naming the command that installs them."
    missing = [n for n, p in (("chromium", CHROMIUM), ("chromium-driver", DRIVER)) if not p]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if missing:
        msg = (f"browser tests need {missing}: `apt-get install chromium chromium-driver` (Debian) and "
               "`pip install -e '.[dev]'` (selenium); .ci/run installs the browser")
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


# Installed before any script of each document: records what a payload would do.
SENTINELS = """
window.__alerts = [];
for (const f of ["alert", "confirm", "prompt", "print"]) window[f] = (...a) => { window.__alerts.push(f + ": " + a.join(" ")); };
window.__csp = [];
document.addEventListener("securitypolicyviolation", e => window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sample}`));
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(String(e.message)));
"""


def chromium(profile, # a fresh folder for the browser profile
             downloads=None, # where downloads go (None: not set)
             size=(1280, 1000), # window size
            ):
    "A headless Chromium driven by Debian's chromedriver, with the sentinels installed and console and network logged."
    need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--disable-default-apps", f"--window-size={size[0]},{size[1]}",
              f"--user-data-dir={profile}"):
        opts.add_argument(a)
    if downloads is not None:
        opts.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                               "download.prompt_for_download": False})
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)  # a given driver path: Selenium Manager is not asked
    if downloads is not None:
        drv.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": SENTINELS})
    drv.downloads = downloads
    return drv


def requests(drv) -> list:
    "URLs the pages asked for since the last call (Chromium's network log)."
    urls = []
    for e in drv.get_log("performance"):
        m = json.loads(e["message"])["message"]
        if m["method"] == "Network.requestWillBeSent":
            urls.append(m["params"]["request"]["url"])
    return urls


def console_errors(drv) -> list:
    "Console messages of level SEVERE since the last call (uncaught errors, CSP reports, failed loads)."
    return [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]


def open_page(drv, path, # the page's file
              ready="return document.body && document.body.dataset.ready === '1'", # true once the page is usable
              timeout=30):
    "Load a page from disk and wait until `ready` (asked every 20 ms): seconds from the request to ready."
    from selenium.webdriver.support.ui import WebDriverWait
    t0 = time.perf_counter()
    drv.get(Path(path).resolve().as_uri())
    WebDriverWait(drv, timeout, poll_frequency=0.02).until(lambda d: d.execute_script(ready))
    return time.perf_counter() - t0


# Text of the document as a reader sees it (title, text nodes, option labels; no script or style), and which of the
# expected strings it lacks; also every link or source that would run script.
_TEXT_CHECK = """
const want = arguments[0];
const skip = new Set(["SCRIPT", "STYLE", "TEMPLATE", "NOSCRIPT"]);
const parts = [document.title];
const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT,
  {acceptNode: n => skip.has(n.parentNode.nodeName) ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
while (walk.nextNode()) parts.push(walk.currentNode.data);
const text = parts.join("");
const urls = [...document.querySelectorAll("[href], [src], [action], [formaction]")].flatMap(e =>
  ["href", "src", "action", "formaction"].map(a => e.getAttribute(a)).filter(v => v != null));
return {missing: want.map((s, i) => text.includes(s) ? -1 : i).filter(i => i >= 0), chars: text.length,
        scripted: urls.filter(u => /^[\\s\\x00-\\x1f]*(javascript|vbscript|data:text\\/html)/i.test(u)).map(u => u.slice(0, 80))};
"""


def ran(drv) -> dict:
    "What a payload would have left: the sentinel, alerts, CSP violations, uncaught errors (after the page settled)."
    drv.execute_async_script("const done = arguments[0]; requestAnimationFrame(() => setTimeout(done, 100));")
    return drv.execute_script("return {pwned: typeof window.__pwned === 'undefined' ? null : String(window.__pwned), "
                              "alerts: window.__alerts || [], csp: window.__csp || [], errors: window.__errors || []}")


def assert_nothing_ran(drv, what="the page"):
    "Assert that no payload ran and nothing asked the network, since the page was opened (or the last check)."
    r = ran(drv)
    assert r == {"pwned": None, "alerts": [], "csp": [], "errors": []}, f"{what}: {r}"
    errs = console_errors(drv)
    assert errs == [], f"{what}: console errors {errs}"
    bad = [u[:120] for u in requests(drv) if not u.startswith(LOCAL)]
    assert bad == [], f"{what} asked the network for {bad}"


def check_page(drv, path, # the page's file
               strings=(), # texts the page must show (each as `shown(s)`)
               *, ready="return document.body && document.body.dataset.ready === '1'", # JavaScript: true once usable
               what=None, # name in messages (default: the file name)
              ) -> dict:
    "Open a page, assert it becomes ready, shows every string literally and ran nothing: {seconds, chars}."
    what = what or Path(path).name
    requests(drv), console_errors(drv)   # forget what earlier pages logged
    seconds = open_page(drv, path, ready)
    want = [shown(s) for s in strings]
    r = drv.execute_script(_TEXT_CHECK, want)
    missing = [repr(want[i][:60]) + (f"… ({len(want[i])} chars)" if len(want[i]) > 60 else "") for i in r["missing"]]
    assert missing == [], f"{what} does not show {missing}"
    assert r["scripted"] == [], f"{what} has script URLs in links or sources: {r['scripted']}"
    assert_nothing_ran(drv, what)
    return {"seconds": seconds, "chars": r["chars"]}


# ---- Synthetic runs whose every field holds the corpus (no model is run) ----------------------------------------------

def _png(path, color):
    from PIL import Image
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32), color).save(path)
    return path


def _spec(run, study, **params):
    run.mkdir(parents=True, exist_ok=True)
    (run / "spec.json").write_text(json.dumps({"study": study, "model": ALL_SHORT, "seed": ALL_SHORT, "params": params}),
                                   encoding="utf-8")
    (run / "manifest.json").write_text(json.dumps({"run_id": ALL_SHORT}), encoding="utf-8")


def acrb_run(run, # the run folder to write
             mode="t2i", # "t2i" or "i2i"
             labelling=None, # t2i: name of a labelling export folder in the run (its labels imported), None: no labels
            ) -> dict:
    """A finished ACRB run (spec, manifest, Stage III table, images, item store): per hostile string `h` two items whose
    every text field is `h` — one keyed by `h` itself with a `javascript:` image path, one with a plain key and an image
    (labelled `h` through a real labelling export and import, when `labelling` is given). I2I items name `h` as their
    source photo (never found). Returns {key: the item's fields} for the checks."""
    import pandas as pd
    from acrb_nb.store import ItemStore
    run = Path(run)
    _spec(run, "acrb", mode=mode)
    rows = []
    for j, (name, h) in enumerate(HOSTILE.items()):
        for plain in (False, True):
            img = f"blobs/{j:02d}.png" if plain else URLS[j % len(URLS)]
            if plain:
                _png(run / img, (20 * j, 120, 200))
            rows.append({"key": f"lab{j}" if plain else f"{h}·{j}", "mode": mode, "text": h, "attribute_id": h, "domain": h,
                         "final_outcome": h, "judge_cue": h, "reason": h, "image": img, "prompt_id": h, "attribute_type": h,
                         "code": h, "blank_kind": h, "judge_evidence": h, "judge_substitute": h, "judge2_cue": h,
                         "judge_probs": json.dumps({h: 0.75}), "source_id": h if mode == "i2i" else None,
                         "source_sha256": None, "error_kind": h})
    df = pd.DataFrame(rows)
    df.to_parquet(run / "stage3_evaluation.parquet")
    store = ItemStore(run / "items.sqlite")
    for k in df.key[df.key.str.startswith("lab")]:
        store.put(k, {"stage": "stage2", "outcome": "generated"})
    if labelling:
        from acrb_nb.labels import export_for_labelling, import_labels
        from acrb_nb.validation import sample_items
        lab = df[df.key.str.startswith("lab")].assign(question=df.text, verdict=df.judge_cue)
        sample = sample_items(lab, len(lab), strata=["attribute_id"], seed=0)
        folder = export_for_labelling(sample, run / labelling, store, labels=list(HOSTILE.values()), show_verdict=True)
        sheet = pd.read_csv(folder / "labels.csv", dtype=str, keep_default_na=False)
        sheet["human_label"] = sheet.key.map(dict(zip(lab.key, lab.text)))
        sheet.to_csv(folder / "labels.csv", index=False, lineterminator="\n")
        summary = import_labels(folder, store)
        assert summary["labelled"] == len(lab), summary
    store.close()
    return {r["key"]: r for r in rows}


def iat_run(run) -> dict:
    "An IAT run: per hostile string two trials whose every field is it (choice A, and none), one image missing."
    run = Path(run)
    _spec(run, "iat", images_run=ALL_SHORT)
    png = _png(run / "img" / "p.png", (90, 160, 90))
    lines = []
    for j, h in enumerate(HOSTILE.values()):
        for i, choice in enumerate(("A", "none")):
            lines.append({"key": f"{h}·{j}{i}", "trial_id": h, "pair_id": h, "condition": h, "outcome": h, "choice": choice,
                          "A_group": h, "B_group": h + "(B)", "instruction": h, "model_response": h, "error": h,
                          "images": [URLS[j % len(URLS)], str(png)], "image_sha256": [h, None], "confidence": 40 + j,
                          "design": h, "direction": h, "option_A": h, "option_B": h, "A_word": h, "B_word": h,
                          "image_group": h, "hit_pos": h, "error_kind": h, "image_attributes": {h: h}})
    (run / "iat_results_hostile.jsonl").write_text("".join(json.dumps(l, ensure_ascii=False) + "\n" for l in lines),
                                                   encoding="utf-8")
    return {l["key"]: l for l in lines}


def toxicity_run(run) -> dict:
    "A toxicity run over a ToxiGen-format file of hostile texts, two identity columns named by hostile strings, a hostile rule."
    import numpy as np
    import pandas as pd
    from acrb_nb.view import record_decision
    run = Path(run)
    texts = [h for h in HOSTILE.values() for _ in range(2)]
    data = run.parent / f"{run.name}_texts.parquet"
    pd.DataFrame({"text": texts, "target_group": "asian", "toxicity_score": [1.0 + 4 * (i % 2) for i in range(len(texts))]}
                 ).to_parquet(data)
    _spec(run, "toxicity", dataset=str(data), task="toxicity")
    score = np.linspace(-2, 2, len(texts))
    ids = {HOSTILE["comment_script"]: (np.arange(len(texts)) % 3 == 0) * 1.0, HOSTILE["img_onerror"]: (np.arange(len(texts)) % 2) * 1.0}
    df = pd.DataFrame({"idx": range(len(texts)), "pred": (score > 0).astype(int), "score": score, "prob": 1 / (1 + np.exp(-score)),
                       "scored": [i != 3 for i in range(len(texts))], "key": [f"{t}·{i}" for i, t in enumerate(texts)],
                       "label": [i % 2 for i in range(len(texts))], "toxicity_human": 3.0, **ids,
                       "score_cc": score - 0.5, "pred_cc": (score > 0.5).astype(int)})
    df.to_parquet(run / "zs_preds.parquet")
    record_decision(run, 0.23, ALL_SHORT)   # just above one row's score: its card needs 3 decimals (0.555 ≤ 0.557)
    return {r["key"]: r for r in df.to_dict("records")}
