"""The run viewer and the labelling page in a real browser: Debian's headless Chromium driven by Selenium through
Debian's chromedriver (no download, no network).

One 432-item simulated ACRB audit (the ACRB report's defaults: 18 base prompts x 24 attribute values, the simulated
judge and the CLIP judge) with a 100-item labelling sample is shared by the tests:

- the viewer opens in under 2 s (printed), and the count of every filter value equals the count in the run's own
  Stage III table; a filter and the search box combine;
- 100 items are labelled with the keyboard (real key events), the page is reloaded after 50 and keeps them, the
  downloaded labels.csv imports to exactly the keyed labels, and the judge-corrected estimates from it equal those
  from the same labels written into labels.csv directly;
- neither page makes a request that is not a file, data: or blob: URL (Chromium's network log is read back).

Two more pages are built without a model:

- hostile text (tests/hostile.py's corpus: script, comment and CDATA openers and closers, an event handler, `javascript:`
  URLs, template syntax, U+2028/9, NUL, an RTL override, quotes and backslashes, a 100,000-character line) in every
  field of a viewer of each study (ACRB T2I with human labels imported through a labelling sample, ACRB I2I, IAT,
  toxicity) and of the labelling page: each page is interactive (every card's fields, every filter count, the search
  and the keys checked against the page's own data), shows every text literally (NUL as U+FFFD) and runs nothing; a
  hand-edited invalid label is marked, not counted, and named by `acrb-view`;
- a synthetic 20,000-item ACRB audit, each item with its own image: the viewer is interactive within 2 s and a filter
  change takes at most 200 ms (the median of 45 changes; the slowest is printed and must stay under 1 s), printed as
  `VIEWER items=20000 interactive_ms=… filter_ms=…`; every filter count equals the records.

Without chromium, chromedriver or selenium the tests skip with the command that installs them; under CI=true a
missing browser fails. With ACRB_SCREENSHOTS=<folder> the screenshots are also written there (the notebook
nbs/93_view.ipynb shows the ones in nbs/images/).
"""
import contextlib
import io
import json
import os
import shutil
import statistics
import time
from pathlib import Path

import pandas as pd
import pytest

import hostile as H
from hostile import LOCAL, shown

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    "The 432-item simulated audit with a 100-item labelling sample (run once for this module)."
    from acrb_nb.acrb.pipeline import run_acrb
    d = tmp_path_factory.mktemp("audit")
    res = run_acrb("sim", n_base_prompts=18, judge=["sim", "clip:sim"], run_dir=d / "run",
                   analysis={"n_boot": 200, "n_perm": 200, "export_labels": 100})
    s3 = pd.read_parquet(d / "run" / "stage3_evaluation.parquet")
    assert len(s3) == 432, len(s3)
    return d, res, s3


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    "One headless Chromium for the module (tests/hostile.py: sentinels installed, console and network logged)."
    drv = H.chromium(tmp_path_factory.mktemp("profile"), tmp_path_factory.mktemp("downloads"))
    yield drv
    drv.quit()


_requests = H.requests


def _open(drv, path: Path) -> float:
    "Load a page from disk and wait until its script says it is ready: seconds."
    return H.open_page(drv, path)


def _shot(drv, name: str, tmp: Path):
    out = Path(os.environ.get("ACRB_SCREENSHOTS") or tmp)
    out.mkdir(parents=True, exist_ok=True)
    drv.save_screenshot(str(out / name))
    return out / name


def _haystack(r, human) -> str:
    "What the page's search box searches, as view.js builds it: the item's own texts and values, no placeholder."
    vals = [r["key"], r["text"], r["reason"], r["judge_cue"], human.get(r["key"])]
    vals += [r[c] for c in ("attribute_id", "domain", "final_outcome", "judge_cue")] + [human.get(r["key"])]
    return "\n".join(str(v) for v in vals if not (v is None or (isinstance(v, float) and pd.isna(v)) or v == "")).lower()


def test_viewer_opens_fast_and_every_filter_count_equals_the_runs_records(audit, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    from acrb_nb.view import write_view
    d, _, s3 = audit
    page = write_view(d / "run")
    _requests(browser)
    seconds = _open(browser, page)
    render = browser.execute_script("return document.body.dataset.renderMs")
    print(f"viewer of {len(s3)} items ({page.stat().st_size / 1e6:.1f} MB): open {seconds:.2f} s in headless Chromium "
          f"(script {render} ms)")
    assert seconds < 2.0, f"the viewer took {seconds:.2f} s to open"
    assert browser.execute_script("return document.body.dataset.shown") == "432"
    assert browser.execute_script("return [...document.images].every(i => i.complete && i.naturalWidth > 0)")
    checked = 0
    for col in ("attribute_id", "domain", "final_outcome", "judge_cue"):
        sel = Select(browser.find_element(By.ID, f"f-{col}"))
        truth = s3[col].fillna("(none)").astype(str).value_counts()
        values = [o.get_attribute("value") for o in sel.options if o.get_attribute("value")]
        assert sorted(values) == sorted(truth.index), (col, values, truth)
        for v in values:
            sel.select_by_value(v)
            shown = int(browser.execute_script("return document.body.dataset.shown"))
            assert shown == truth[v], (col, v, shown, truth[v])
            opt = browser.find_element(By.CSS_SELECTOR, f"#f-{col} option[value='{v}']")
            assert int(opt.get_attribute("data-count")) == truth[v]
            checked += 1
        sel.select_by_value("")
    # a filter and the search box together
    value = s3[s3.hard_refusal].attribute_id.value_counts().index[0]  # the most refused attribute value
    Select(browser.find_element(By.ID, "f-attribute_id")).select_by_value(value)
    q = browser.find_element(By.ID, "q")
    q.send_keys("refused")
    want = sum(r["attribute_id"] == value and "refused" in _haystack(r, {}) for r in s3.to_dict("records"))
    assert int(browser.execute_script("return document.body.dataset.shown")) == want
    q.clear()
    q.send_keys(" ")  # an input event with an empty query
    assert int(browser.execute_script("return document.body.dataset.shown")) == int((s3.attribute_id == value).sum())
    # the search text is the item's own content only: the "(none)" of the filters is not in it (it matched every item)
    Select(browser.find_element(By.ID, "f-attribute_id")).select_by_value("")
    for word in ("(none)", "one"):
        q.clear()
        q.send_keys(word)
        want = sum(word in _haystack(r, {}) for r in s3.to_dict("records"))
        assert int(browser.execute_script("return document.body.dataset.shown")) == want, (word, want)
        assert word != "(none)" or want == 0
    q.clear()
    q.send_keys(" ")
    print(f"{checked} filter values checked against the run's Stage III table")
    _shot(browser, "view.png", tmp_path)
    bad = [u for u in _requests(browser) if not u.startswith(LOCAL)]
    assert bad == [], f"the viewer asked the network for {bad}"


def test_label_100_items_with_the_keyboard_reload_download_import(audit, browser, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from acrb_nb.acrb.pipeline import run_acrb
    from acrb_nb.labels import import_labels, labels_frame
    d, res, s3 = audit
    folder = d / "run" / "labelling"
    sheet = pd.read_csv(folder / "labels.csv", dtype=str, keep_default_na=False)
    meta = json.loads((folder / "sample.json").read_text())
    assert len(sheet) == 100 and (folder / "labels.html").exists()
    truth = pd.read_parquet(d / "run" / "sim_truth.parquet").set_index("key")["cue"].to_dict()
    labels = meta["labels"]
    want = {k: (truth.get(k) if truth.get(k) in labels else labels[i % len(labels)]) for i, k in enumerate(sheet.key)}

    _requests(browser)
    _open(browser, folder / "labels.html")
    keys = ActionChains(browser)

    def press(k):
        keys.send_keys(k).perform()

    def state(name):
        return browser.execute_script(f"return document.body.dataset.{name}")

    keyed = {}
    for i in range(100):
        if i == 50:  # reload in the middle: the 50 labels and the position survive
            browser.refresh()
            from selenium.webdriver.support.ui import WebDriverWait
            WebDriverWait(browser, 30).until(lambda b: b.execute_script("return document.body.dataset.ready") == "1")
            assert (state("labelled"), state("pos")) == ("50", "50")
            loaded = "return [...document.images].length > 0 && [...document.images].every(i => i.complete && i.naturalWidth > 0)"
            assert browser.execute_script(loaded), "the item's image did not load from images/ beside the page"
            _shot(browser, "labels.png", tmp_path)
        if i == 10:  # skip forward and come back
            press(Keys.ARROW_RIGHT)
            assert state("pos") == "11"
            press(Keys.ARROW_LEFT)
        key = state("key")
        assert key == sheet.key[i], (i, key)
        press(str(labels.index(want[key]) + 1))
        keyed[key] = want[key]
    assert state("labelled") == "100"
    press("d")
    csv = browser.downloads / "labels.csv"
    for _ in range(100):
        if csv.exists() and csv.stat().st_size:
            break
        time.sleep(0.1)
    assert csv.exists(), sorted(browser.downloads.iterdir())
    bad = [u for u in _requests(browser) if not u.startswith(LOCAL)]
    assert bad == [], f"the labelling page asked the network for {bad}"

    # two copies of the run: A gets the labels written directly, B the page's CSV
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(d / "run", a)
    shutil.copytree(d / "run", b)
    direct = sheet.assign(human_label=sheet.key.map(keyed))
    direct.to_csv(a / "labelling" / "labels.csv", index=False, lineterminator="\n")
    got = pd.read_csv(csv, dtype=str, keep_default_na=False)
    assert list(got.columns) == list(sheet.columns) and got.drop(columns="human_label").equals(sheet.drop(columns="human_label"))
    shutil.copyfile(csv, b / "labelling" / "labels.csv")
    from acrb_nb.store import ItemStore
    summary = import_labels(b / "labelling", ItemStore(b / "items.sqlite"))
    assert (summary["added"], summary["labelled"], summary["blank"]) == (100, 100, 0), summary
    imported = labels_frame(ItemStore(b / "items.sqlite"))
    assert dict(zip(imported.key, imported.label)) == keyed
    corrected = {}
    for run in (a, b):
        r = run_acrb("sim", n_base_prompts=18, judge=["sim", "clip:sim"], run_dir=run,
                     analysis={"n_boot": 200, "n_perm": 200, "labels": run / "labelling", "min_labels": 3})
        assert r.correction is not None, f"{run.name}: the labels were not used"
        corrected[run.name] = json.loads((run / "acrb_summary.json").read_text())["judge_correction"]
    assert corrected["a"] == corrected["b"] and corrected["a"]["n_labels"] == 100
    # min_labels=3 (about 4 labels per value here): the corrected rates exist, so the equality is about numbers
    erasure = corrected["a"]["erasure"]
    cited = {v: e["corrected"] for v, e in erasure.items() if e.get("corrected") is not None}
    assert len(cited) >= len(erasure) // 2, erasure
    print(f"100 labels keyed with one reload, downloaded, imported exactly; {len(cited)} corrected erasure rates equal, "
          f"e.g. {dict(list(cited.items())[:3])}")


# ---- hostile text in every field of every page -----------------------------------------------------------------------

LABELLING = H.URLS[0]   # the labelling folder of the T2I run is named "javascript:window.__pwned=1"


def _island(page: Path):
    "The data a page's script reads (its JSON island)."
    return json.loads(page.read_text(encoding="utf-8").split("id='acrb-data'>", 1)[1].split("</script>", 1)[0])


@pytest.fixture(scope="module")
def hostile_pages(tmp_path_factory):
    """The viewer of each study and the labelling page, written once over runs whose every field holds the corpus;
    labels.csv then edited by hand: an invalid label (`maybe`) and URLs as image paths; `acrb-view` rewrites the page."""
    from acrb_nb.view import main, write_view
    d = tmp_path_factory.mktemp("hostile")
    H.acrb_run(d / "t2i", "t2i", labelling=LABELLING)
    H.acrb_run(d / "i2i", "i2i")
    H.iat_run(d / "iat")
    H.toxicity_run(d / "tox")
    folder = d / "t2i" / LABELLING
    sheet = pd.read_csv(folder / "labels.csv", dtype=str, keep_default_na=False)
    sheet.loc[0, "human_label"] = "maybe"
    for i, u in enumerate(H.URLS):
        sheet.loc[1 + i, "image"] = u
    sheet.loc[len(sheet) - 1, "notes"] = H.HOSTILE["comment_script"]   # the last text of the page's data: never healed
    sheet.to_csv(folder / "labels.csv", index=False, lineterminator="\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main([str(folder)]) == 0
    pages = {name: write_view(d / sub, page_size=10) for name, sub in
             (("acrb t2i", "t2i"), ("acrb i2i", "i2i"), ("iat", "iat"), ("toxicity", "tox"))}
    return pages, folder, sheet, err.getvalue()


# (after the images of the cards have loaded: `decode()` settles once an image is loaded or has failed)
_CARDS = """const done = arguments[arguments.length - 1];
Promise.all([...document.querySelectorAll("#items img")].map(i => i.decode().catch(() => null))).then(() => done(
[...document.querySelectorAll("#items .card")].map(c => ({key: c.dataset.key,
  show: Object.fromEntries(["text", "answer", "reason", "verdict", "human", "key"].map(f =>
        [f, [...c.querySelectorAll(`[data-show="${f}"]`)].map(e => e.textContent)])),
  tags: [...c.querySelectorAll(".tags > span")].map(e => [e.dataset.field, e.querySelector("bdi").textContent]),
  extra: c.querySelector("details pre").textContent, verdict: (c.querySelector(".verdict") || {}).textContent || null,
  figures: [...c.querySelectorAll("figure")].map(f => f.textContent),
  loaded: [...c.querySelectorAll("img")].map(i => i.complete && i.naturalWidth > 0)}))));"""
# set a control's value as a user would: the count shown (the page updates it in the event handler)
_SET_NOW = """const [sel, v] = arguments; const e = document.querySelector(sel);
e.value = v; e.dispatchEvent(new Event(e.tagName === "SELECT" ? "change" : "input")); return +document.body.dataset.shown;"""
# ... and the time until the page has drawn the result
_SET = """const [sel, v, done] = arguments; const e = document.querySelector(sel); const t0 = performance.now();
e.value = v; e.dispatchEvent(new Event(e.tagName === "SELECT" ? "change" : "input"));
requestAnimationFrame(() => setTimeout(() => done([+document.body.dataset.shown, performance.now() - t0]), 0));"""


def _values(v) -> list:
    return [str(x) for x in (v if isinstance(v, list) else [v]) if x is not None and x != ""]


def _expected_card(it, facets) -> dict:
    "What a card shows of an item: each field as text (NUL as U+FFFD), the facet tags."
    show = {f: [shown(it[f])] if it.get(f) not in (None, "") else [] for f in ("answer", "reason", "verdict", "human")}
    show.update(text=[shown(it.get("text") or "")], key=[shown(it["key"])])
    return {"show": show, "tags": [[f["field"], shown(v)] for f in facets for v in _values(it.get(f["field"]))]}


def _search_text(it, facets) -> str:
    "What the search box searches (view.js): the item's own texts and values, lower-cased; no placeholder."
    vals = [it.get(f) for f in ("key", "text", "answer", "reason", "verdict", "human")]
    return "\n".join(_values(vals) + [v for f in facets for v in _values(it.get(f["field"]))]).lower()


def _check_viewer(drv, name, page) -> dict:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    data = _island(page)
    items, facets = {it["key"]: it for it in data["items"]}, data["facets"]
    assert len(items) == len(data["items"]) == 2 * len(H.HOSTILE), name
    H.check_page(drv, page, [H.ALL_SHORT], what=name)   # the title holds every short string
    seen = {}
    while True:   # every page of cards, turned with the arrow key
        for c in drv.execute_async_script(_CARDS):
            it = items[c["key"]]
            want = _expected_card(it, facets)
            assert (c["show"], c["tags"]) == (want["show"], want["tags"]), (name, c["key"][:40])
            assert json.loads(c["extra"]) == it["extra"], (name, c["key"][:40])
            assert all(c["loaded"]) and len(c["loaded"]) == len(it["images"]), (name, c["figures"])
            if data.get("decision") and it["verdict"] is not None:
                d, k = data["decision"], 2
                while k < 6 and f"{it['prob']:.{k}f}" == f"{d['p_threshold']:.{k}f}":
                    k += 1
                sign = ">" if it["verdict"] == d["positive"] else "≤"
                assert c["verdict"] == (f"model: {it['verdict']} · P(toxic) {it['prob']:.{k}f} {sign} {d['p_threshold']:.{k}f}, "
                                        f"the threshold of {shown(d['rule'])}"), c["verdict"]
                assert (it["prob"] > d["p_threshold"]) == (sign == ">"), c["verdict"]
            seen[c["key"]] = True
        page_no, pages = (int(drv.execute_script(f"return document.body.dataset.{k}")) for k in ("page", "pages"))
        if page_no == pages:
            break
        ActionChains(drv).send_keys(Keys.ARROW_RIGHT).perform()
        assert int(drv.execute_script("return document.body.dataset.page")) == page_no + 1
    assert sorted(seen) == sorted(items), name
    n_filters = 0
    # every filter value's count equals the items that hold it, and selecting it shows them: every value of the first
    # filter, a few of the others (a card whose every field is the 100,000-character line takes a while to lay out)
    picked = {shown(H.HOSTILE[k]) for k in ("comment_script", "nul", "rtl_override")} | {"(none)"}
    for k, f in enumerate(facets):
        truth = {}
        for it in items.values():
            for v in _values(it.get(f["field"])) or ["(none)"]:
                truth[v] = truth.get(v, 0) + 1
        opts = drv.execute_script(f"return [...document.getElementById('f-{f['field']}').options].slice(1)"
                                  ".map(o => [o.value, o.textContent, +o.dataset.count])")
        assert sorted(o[0] for o in opts) == sorted(truth), (name, f["field"])
        for v, label, count in opts:
            assert (label, count) == (f"{shown(v)} ({truth[v]})", truth[v]), (name, f["field"], v[:40])
            if k > 0 and shown(v) not in picked:
                continue
            got = drv.execute_script(_SET_NOW, f"#f-{f['field']}", v)
            assert got == truth[v], (name, f["field"], v[:40], got)
            n_filters += 1
        drv.execute_script(_SET_NOW, f"#f-{f['field']}", "")
    hay = [_search_text(it, facets) for it in items.values()]
    for q in [*H.HOSTILE.values(), "(none)", "one"]:   # every hostile string typed into the search box
        got = drv.execute_script(_SET_NOW, "#q", q)
        assert got == sum(q.strip().lower() in h for h in hay), (name, q[:40], got)
    assert drv.execute_script(_SET_NOW, "#q", "") == len(items)
    H.assert_nothing_ran(drv, name)
    return {"cards": len(seen), "filters": n_filters}


def _check_labelling(drv, folder, sheet, stderr, shots) -> dict:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    page = folder / "labels.html"
    labels = list(H.HOSTILE.values())
    assert f"1 label(s) outside the allowed values" in stderr and f"({sheet.key[0]} = 'maybe')" in stderr, stderr[:300]
    H.check_page(drv, page, labels + ["1 label(s) outside the allowed values"], what="labelling page")   # buttons
    state = lambda k: drv.execute_script(f"return document.body.dataset.{k}")
    n = len(sheet)
    assert (state("labelled"), state("invalid")) == (str(n - 1), "1")   # `maybe` is marked and not counted
    item = """const done = arguments[0], b = document.getElementById("item");
    Promise.all([...b.querySelectorAll("img")].map(i => i.decode().catch(() => null))).then(() => done({
      question: b.querySelector(".question").textContent,
      text: (b.querySelector(".text") || {}).textContent, verdict: (b.querySelector(".verdict b") || {}).textContent,
      invalid: (b.querySelector(".invalid b") || {}).textContent || null,
      bad: [...b.querySelectorAll(".bad-path code")].map(e => e.textContent),
      imgs: [...b.querySelectorAll("img")].map(i => [i.getAttribute("src"), i.complete && i.naturalWidth > 0])}));"""
    for i, r in enumerate(sheet.to_dict("records")):
        assert state("key") == r["key"], (i, r["key"])
        got = drv.execute_async_script(item)
        assert (got["question"], got["text"], got["verdict"]) == (shown(r["question"]), shown(r["text"]),
                                                                  shown(r["judge_verdict"])), i
        paths = [p for p in r["image"].split(";") if p]
        if i in range(1, 1 + len(H.URLS)):   # a URL in the image column: shown as text, never loaded
            assert (got["bad"], got["imgs"]) == ([shown(p) for p in paths], []), (i, got)
        else:
            assert (got["bad"], got["imgs"]) == ([], [[p, True] for p in paths]), (i, got)
        assert got["invalid"] == ("maybe" if i == 0 else None) and state("itemInvalid") == ("1" if i == 0 else "0")
        if i in (0, 1):
            _shot(drv, f"labels-hostile-{i + 1}.png", shots)
        ActionChains(drv).send_keys("1" if i == 0 else Keys.ARROW_RIGHT).perform()   # the invalid one gets a label
    assert (state("labelled"), state("invalid")) == (str(n), "0")
    got = pd.read_csv(io.StringIO(drv.execute_script("return window.acrbLabels.buildCsv()")), dtype=str, keep_default_na=False)
    assert got.equals(sheet.assign(human_label=[labels[0]] + list(sheet.human_label[1:]))), "the download differs from the sheet"
    H.assert_nothing_ran(drv, "labelling page")
    return {"items": n}


def test_hostile_text_in_every_field_of_every_page(hostile_pages, browser, tmp_path):
    pages, folder, sheet, stderr = hostile_pages
    for name, page in pages.items():
        r = _check_viewer(browser, name, page)
        print(f"viewer {name}: {r['cards']} cards checked field by field, every filter count, {r['filters']} values selected, "
              f"{len(H.HOSTILE) + 2} searches, {page.stat().st_size / 1e6:.1f} MB; shown literally, nothing ran")
        if name == "acrb t2i":
            _shot(browser, "view-hostile.png", tmp_path)
    r = _check_labelling(browser, folder, sheet, stderr, tmp_path)
    print(f"labelling page: {r['items']} items checked, the invalid label marked, not counted and named by acrb-view")


# ---- 20,000 items ------------------------------------------------------------------------------------------------------

def _synthetic_audit(run: Path, n: int, side: int = 64, seed: int = 0) -> pd.DataFrame:
    """A finished-looking ACRB run of `n` items (no model): a Stage III table of 24 attribute values x 9 domains, the
    outcomes of a refusing model, and for each generated item its own image (a `side`-pixel crop of a shipped photo)."""
    import numpy as np
    from PIL import Image
    from acrb_nb.acrb.sources import DEFAULT_SOURCES
    g = np.random.default_rng(seed)
    photos = [np.asarray(Image.open(p).convert("RGB")) for p in sorted(Path(DEFAULT_SOURCES).iterdir())
              if p.suffix.lower() in (".jpg", ".jpeg", ".png")]
    attrs = [f"{d}:{v}" for d in ("gender", "age", "culture", "disability") for v in "abcdef"]
    domains = ["neutral", "occupational", "violence_adjacent", "self_harm_adjacent", "substance_related", "privacy_sensitive",
               "religious_cultural", "sexual_wellness", "legal_risk"]
    outcome = g.choice(["generated", "refused_policy", "refused_safety_filter", "blank_or_placeholder"], n, p=[.8, .1, .06, .04])
    cues = g.choice(["present", "absent", "substituted"], n)
    for b in range(256):
        (run / "blobs" / f"{b:02x}").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        o, img, a, dom = outcome[i], None, attrs[i % 24], domains[(i // 24) % 9]
        if o in ("generated", "blank_or_placeholder"):
            ph = photos[i % len(photos)]
            y, x = divmod((i // len(photos)) * 7 % ((ph.shape[0] - side) * (ph.shape[1] - side)), ph.shape[1] - side)
            img = f"blobs/{i % 256:02x}/{i:06d}.jpg"
            Image.fromarray(ph[y:y + side, x:x + side]).save(run / img, quality=90)
        cue = cues[i] if img else None
        rows.append({"key": f"{i:016x}", "mode": "t2i", "prompt_id": f"p{i // 24}", "attribute_id": a,
                     "attribute_type": a.split(":")[0], "domain": dom, "text": f"A photo of a {a} person, scene {i // 24}, {dom}",
                     "final_outcome": o, "code": "sim_policy" if o == "refused_policy" else None,
                     "reason": "[sim] This request was rejected by the simulated content policy." if o.startswith("refused") else None,
                     "image": img, "judge_cue": cue, "judge_probs": json.dumps({cue: 0.8}) if cue else None,
                     "judge_evidence": f"the marker is {'visible' if cue == 'present' else 'not visible'}" if cue else None,
                     "seed": i % 2, "image_index": i % 2})
    df = pd.DataFrame(rows)
    df.to_parquet(run / "stage3_evaluation.parquet")
    (run / "spec.json").write_text(json.dumps({"study": "acrb", "model": "synthetic", "seed": seed, "params": {"mode": "t2i"}}))
    return df


def test_viewer_of_20000_items_is_interactive_in_2_s_and_filters_in_200_ms(browser, tmp_path):
    from acrb_nb.view import write_view
    n = 20_000
    df = _synthetic_audit(tmp_path / "run", n)
    t0 = time.perf_counter()
    page = write_view(tmp_path / "run")
    write_s, mb = time.perf_counter() - t0, page.stat().st_size / 1e6
    H.requests(browser), H.console_errors(browser)
    # navigation start -> the first page of cards drawn, the filters working; opened twice, the faster counts (the
    # first load in a fresh browser also pays for starting its renderer, and this machine's 2 cores are shared)
    loads = []
    for _ in range(2):
        wall = H.open_page(browser, page, ready="return document.body.dataset.paintedMs !== undefined")
        ds = browser.execute_script("return {...document.body.dataset}")
        loads.append(int(ds["paintedMs"]))
    interactive = min(loads)
    assert int(ds["shown"]) == n and int(ds["cards"]) == 60
    # only the page's cards are in the document, and their images are there
    assert browser.execute_script("return document.images.length") <= 60
    assert browser.execute_async_script("const done = arguments[0]; Promise.all([...document.images].map(i => i.decode()"
                                        ".catch(() => null))).then(() => done([...document.images].every(i => i.complete "
                                        "&& i.naturalWidth > 0)))")
    times, checked = [], 0
    for col in ("attribute_id", "domain", "final_outcome", "judge_cue"):
        truth = df[col].fillna("(none)").value_counts()
        for v in sorted(truth.index):
            got, ms = browser.execute_async_script(_SET, f"#f-{col}", v)
            count = browser.execute_script(f"return +[...document.getElementById('f-{col}').options]"
                                           ".find(o => o.value === arguments[0]).dataset.count", v)
            assert got == count == truth[v], (col, v, got, count, truth[v])
            times.append(ms)
            checked += 1
        times.append(browser.execute_async_script(_SET, f"#f-{col}", "")[1])
    search, cols = [], ("key", "text", "reason", "judge_cue", "attribute_id", "domain", "final_outcome")
    hay = ["\n".join(r[c] for c in cols if isinstance(r[c], str)).lower() for r in df.to_dict("records")]
    for q in ("scene 1", "violence", "refused", "(none)"):
        got, ms = browser.execute_async_script(_SET, "#q", q)
        assert got == sum(q in h for h in hay), q
        search.append(ms)
    browser.execute_async_script(_SET, "#q", "")
    H.assert_nothing_ran(browser, "20,000-item viewer")
    _shot(browser, "view-20k.png", tmp_path)
    # A change is timed from the select's change event to the next frame drawn. The figure is the median of the 45
    # changes (the slowest is printed too: on this 2-core machine shared with other jobs, one change in 45 can wait for
    # the CPU for longer than the change itself takes); the slowest must still stay far from the 3.6 s of the old page.
    filter_ms, slowest = statistics.median(times), max(times)
    print(f"VIEWER items={n} interactive_ms={interactive} filter_ms={filter_ms:.0f} (loads {loads[0]} and {loads[1]} ms; "
          f"slowest change {slowest:.0f} of {len(times)}) search_ms={max(search):.0f} page_mb={mb:.1f} "
          f"written_in_s={write_s:.1f}; {checked} filter values = the Stage III counts")
    assert interactive <= 2000, f"the 20,000-item viewer took {interactive} ms to become interactive"
    assert filter_ms <= 200 and slowest <= 1000, f"filter changes took {filter_ms:.0f} ms (median), {slowest:.0f} ms (slowest)"
