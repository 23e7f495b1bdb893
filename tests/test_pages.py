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

Without chromium, chromedriver or selenium the tests skip with the command that installs them; under CI=true a
missing browser fails. With ACRB_SCREENSHOTS=<folder> the screenshots are also written there (the notebook
nbs/93_view.ipynb shows the ones in nbs/images/).
"""
import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
LOCAL = ("file:", "data:", "blob:", "about:", "chrome:", "devtools:")


def _need_browser():
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
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    downloads = tmp_path_factory.mktemp("downloads")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--disable-default-apps", "--window-size=1280,1000",
              f"--user-data-dir={tmp_path_factory.mktemp('profile')}"):
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                           "download.prompt_for_download": False})
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)  # a given driver path: Selenium Manager is not asked
    drv.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    drv.downloads = downloads
    yield drv
    drv.quit()


def _requests(drv) -> list:
    "URLs the page asked for since the last call (Chromium's network log)."
    urls = []
    for e in drv.get_log("performance"):
        m = json.loads(e["message"])["message"]
        if m["method"] == "Network.requestWillBeSent":
            urls.append(m["params"]["request"]["url"])
    return urls


def _open(drv, path: Path) -> float:
    "Load a page from disk and wait until its script says it is ready: seconds."
    from selenium.webdriver.support.ui import WebDriverWait
    t0 = time.perf_counter()
    drv.get(path.resolve().as_uri())
    WebDriverWait(drv, 30).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
    return time.perf_counter() - t0


def _shot(drv, name: str, tmp: Path):
    out = Path(os.environ.get("ACRB_SCREENSHOTS") or tmp)
    out.mkdir(parents=True, exist_ok=True)
    drv.save_screenshot(str(out / name))
    return out / name


def _haystack(r, human) -> str:
    "What the page's search box searches, as view.js builds it."
    vals = [r["key"], r["text"], r["reason"], r["judge_cue"], human.get(r["key"])]
    vals += [r[c] for c in ("attribute_id", "domain", "final_outcome", "judge_cue")] + [human.get(r["key"]) or "(none)"]
    return " ".join("" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v) for v in vals).lower()


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
