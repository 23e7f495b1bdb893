"""Bad inputs: every case either raises an error that says what was wrong and how to fix it, or is handled gracefully
in a documented way (asserted here). Cases that point at an existing run folder also check that the run is intact
afterwards (same stored items, same metrics and outputs; the manifest may only gain a session stamped `failed`)."""
import hashlib, io, json, shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from reliability_helpers import ROOT, store_snapshot

AREA = "bad-inputs"
pytestmark = pytest.mark.timeout(300)


# ------------------------------------------------------------------------------------------------------------------
# fixtures: an existing T2I run, an existing I2I run with its own source folder
def _tree(run_dir) -> dict:
    "What must not change in a run: stored items (logically) and every file but the manifest and the SQLite files."
    run_dir = Path(run_dir)
    files = {p.relative_to(run_dir).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in run_dir.rglob("*")
             if p.is_file() and p.name != "manifest.json" and not p.name.startswith("items.sqlite")}
    return {"files": files, "items": store_snapshot(run_dir / "items.sqlite")}


def _intact(run_dir, before):
    after = _tree(run_dir)
    assert after == before, "an existing run folder changed"
    man = json.loads((Path(run_dir) / "manifest.json").read_text())
    assert all(s["status"] in ("finished", "failed") for s in man["sessions"])
    return True


T2I = dict(model="sim", mode="t2i", attributes=["gender"], n_base_prompts=2, seed=0, analysis={"n_boot": 50})


@pytest.fixture(scope="module")
def t2i_run(tmp_path_factory):
    from acrb_nb.acrb.pipeline import run_acrb
    d = tmp_path_factory.mktemp("t2i") / "run"
    run_acrb(**T2I, run_dir=str(d))
    return d


@pytest.fixture(scope="module")
def i2i_run(tmp_path_factory):
    from acrb_nb.acrb.pipeline import run_acrb
    base = tmp_path_factory.mktemp("i2i")
    src = base / "sources"
    src.mkdir()
    for p in sorted((ROOT / "data" / "images" / "public").glob("*.jpg"))[:2]: shutil.copy(p, src / p.name)
    kw = dict(model="sim", mode="i2i", attributes=["gender"], source_dir=str(src), seed=0, analysis={"n_boot": 50})
    run_acrb(**kw, run_dir=str(base / "run"))
    return base / "run", src, kw


@pytest.fixture
def counted(reliability):
    "Count the case (and whether it is an error or a graceful handling) once its assertions have passed."
    box = {}
    yield box
    if box: reliability.add(AREA, cases=1, clear_errors=int(box.get("kind") == "error"),
                            graceful=int(box.get("kind") == "graceful"), corrupted_runs=0)


def _fails(fn, exc, *needles):
    "Call fn, expect `exc`, and check that the message names each needle (the problem and the fix)."
    with pytest.raises(exc) as e: fn()
    msg = str(e.value)
    for n in needles: assert n in msg, f"error message lacks {n!r}: {msg}"
    return msg


# ------------------------------------------------------------------------------------------------------------------
# ACRB: names, parameters, prompt sets, run folders
def test_unknown_model_name(t2i_run, counted):
    from acrb_nb.acrb.pipeline import run_acrb
    before = _tree(t2i_run)
    _fails(lambda: run_acrb(**{**T2I, "model": "gpt-image1"}, run_dir=str(t2i_run)), KeyError, "gpt-image1",
           "Did you mean", "gpt-image-1")
    counted["kind"] = "error" if _intact(t2i_run, before) else None


def test_unknown_attribute_name(tmp_path, counted):
    from acrb_nb.acrb.pipeline import run_acrb
    _fails(lambda: run_acrb(**{**T2I, "attributes": ["gendr"]}, run_dir=str(tmp_path / "r")), (KeyError, ValueError),
           "gendr", "gender")
    assert not (tmp_path / "r").exists(), "a typo must not leave a run folder behind"
    counted["kind"] = "error"


def test_unknown_domain(t2i_run, counted):
    from acrb_nb.acrb.pipeline import run_acrb
    before = _tree(t2i_run)
    _fails(lambda: run_acrb(**{**T2I, "domains": ["weapons"]}, run_dir=str(t2i_run)), ValueError, "weapons", "choose from")
    counted["kind"] = "error" if _intact(t2i_run, before) else None


def test_bad_mode(counted):
    from acrb_nb.acrb.pipeline import run_acrb
    _fails(lambda: run_acrb(**{**T2I, "mode": "text2image"}), ValueError, "'t2i' or 'i2i'")
    counted["kind"] = "error"


def test_empty_prompt_set(tmp_path, counted):
    from acrb_nb.acrb.pipeline import run_acrb
    from acrb_nb.acrb.generate import t2i_items
    from acrb_nb.acrb.prompts import stage1_prompts, load_attributes
    _fails(lambda: run_acrb(**{**T2I, "n_base_prompts": 0}, run_dir=str(tmp_path / "r")), ValueError, "n_base_prompts", "≥ 1")
    assert not (tmp_path / "r").exists()
    s1 = stage1_prompts("v1", load_attributes("v1", ["gender"]), seed=0).rows
    _fails(lambda: t2i_items(s1.iloc[:0]), ValueError, "prompt set is empty", "n_base_prompts")
    counted["kind"] = "error"


def test_zero_images_per_prompt(tmp_path, counted):
    from acrb_nb.acrb.pipeline import run_acrb
    _fails(lambda: run_acrb(**{**T2I, "images_per_prompt": 0}, run_dir=str(tmp_path / "r")), ValueError, "images_per_prompt",
           "≥ 1")
    assert not (tmp_path / "r").exists()
    counted["kind"] = "error"


def test_run_folder_of_another_spec(t2i_run, counted):
    from acrb_nb.acrb.pipeline import run_acrb
    before = _tree(t2i_run)
    _fails(lambda: run_acrb(**{**T2I, "seed": 1}, run_dir=str(t2i_run)), ValueError, "belongs to another spec",
           "Use a new run_dir")
    counted["kind"] = "error" if _intact(t2i_run, before) else None


def test_unreadable_spec_and_corrupt_store(t2i_run, tmp_path, counted):
    "A truncated spec.json or a corrupt items.sqlite is reported with what to do, and nothing is overwritten."
    from acrb_nb.acrb.pipeline import run_acrb
    bad = tmp_path / "copy"
    shutil.copytree(t2i_run, bad)
    spec = (bad / "spec.json").read_text()
    (bad / "spec.json").write_text(spec[: len(spec) // 2])
    _fails(lambda: run_acrb(**T2I, run_dir=str(bad)), ValueError, "unreadable", "move the folder aside")
    assert (bad / "spec.json").read_text() == spec[: len(spec) // 2]
    bad2 = tmp_path / "copy2"
    shutil.copytree(t2i_run, bad2)
    for p in bad2.glob("items.sqlite-*"): p.unlink()
    (bad2 / "items.sqlite").write_bytes(b"this is not a database" * 100)
    _fails(lambda: run_acrb(**T2I, run_dir=str(bad2)), ValueError, "not a usable item store", "move it aside")
    assert (bad2 / "items.sqlite").read_bytes() == b"this is not a database" * 100
    counted["kind"] = "error"


def test_resume_is_a_noop_for_a_finished_run(t2i_run, counted):
    "Graceful: re-running a finished spec into its folder recomputes nothing and gives the same metrics."
    from acrb_nb.acrb.pipeline import run_acrb
    before = _tree(t2i_run)
    summary = json.loads((t2i_run / "acrb_summary.json").read_text())
    res = run_acrb(**T2I, run_dir=str(t2i_run))
    after = _tree(t2i_run)
    assert after["items"] == before["items"]
    assert {k: v for k, v in res.summary.items() if k != "timestamp"} == {k: v for k, v in summary.items() if k != "timestamp"}
    counted["kind"] = "graceful"


# ------------------------------------------------------------------------------------------------------------------
# Images: corrupt, truncated, zero-byte, non-image files; odd modes and sizes
def _png(im):
    b = io.BytesIO(); im.save(b, format="PNG"); return b.getvalue()


@pytest.mark.parametrize("kind", ["zero-byte", "truncated", "not-an-image"])
def test_corrupt_source_image_in_existing_i2i_run(i2i_run, tmp_path, kind, counted):
    """A bad file appears in the source folder of an existing I2I run (issue 48 item 5): the resume excludes it with its
    reason, as a photograph with no person is, and goes on with the readable ones; no stored item changes or is repeated."""
    import pandas as pd
    from acrb_nb.acrb.pipeline import run_acrb
    run_dir, src, kw = i2i_run
    before = _tree(run_dir)
    real = sorted(src.glob("*.jpg"))[0].read_bytes()
    bad = src / f"zz_{kind}.png"
    bad.write_bytes({"zero-byte": b"", "truncated": real[: len(real) // 3], "not-an-image": b"<html>404</html>" * 10}[kind])
    try: run_acrb(**kw, run_dir=str(run_dir))
    finally: bad.unlink()
    sources = pd.read_csv(run_dir / "sources.csv")
    row = sources[sources.source_id.astype(str) == bad.name]
    assert len(row) == 1 and not row.kept.astype(bool).iloc[0] and not row.readable.astype(bool).iloc[0], sources   # excluded
    assert "unreadable" in row.reason.iloc[0] and "replace or remove the file" in row.reason.iloc[0], row.reason.iloc[0]
    assert _tree(run_dir)["items"] == before["items"]                       # nothing stored changed, nothing repeated
    counted["kind"] = "graceful"


def test_missing_and_empty_source_folder(tmp_path, counted):
    from acrb_nb.acrb.generate import load_sources
    _fails(lambda: load_sources(tmp_path / "nope"), FileNotFoundError, "is not a folder of images")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images here")
    _fails(lambda: load_sources(tmp_path / "empty"), ValueError, "no images")
    _fails(lambda: load_sources(ROOT / "data" / "images" / "public", n=500), ValueError, "asked for n=500", "has only")
    counted["kind"] = "error"


def test_odd_image_modes_and_sizes(tmp_path, counted, monkeypatch):
    """Graceful: palette, alpha, grey, 1-bit, 16-bit, CMYK images and extreme sizes load as RGB (alpha composited on
    white, 16-bit scaled) and go through an editor (the simulator, and Gemini's real SDK request against the fake)."""
    from acrb_nb.acrb.generate import load_sources
    from acrb_nb.adapters.base import load_image
    from acrb_nb.adapters.sim import SimImageEditor
    from acrb_nb.adapters.images import GeminiImages
    from acrb_nb.testing import FakeGemini
    from reliability_helpers import DUMMY_ENV
    for k, v in DUMMY_ENV.items(): monkeypatch.setenv(k, v)
    g = np.random.default_rng(0)
    rgb = Image.fromarray(g.integers(0, 256, (40, 30, 3), dtype=np.uint8))
    cases = {"p.png": rgb.convert("P"), "rgba.png": rgb.convert("RGBA"), "la.png": rgb.convert("LA"), "l.png": rgb.convert("L"),
             "one.png": rgb.convert("1"), "i16.png": Image.fromarray((g.integers(0, 65535, (20, 20))).astype(np.uint16)),
             "cmyk.jpg": rgb.convert("CMYK"), "tiny.png": rgb.resize((1, 1)), "wide.png": rgb.resize((1500, 8)),
             "half-transparent.png": Image.new("RGBA", (16, 16), (255, 0, 0, 0))}
    for name, im in cases.items(): im.save(tmp_path / name)
    df = load_sources(tmp_path)
    assert sorted(df.source_id) == sorted(cases)
    ims = {n: load_image(tmp_path / n) for n in cases}
    assert all(im.mode == "RGB" for im in ims.values())
    assert ims["half-transparent.png"].getpixel((0, 0)) == (255, 255, 255)  # transparent → white, not black
    assert ims["wide.png"].size == (1500, 8) and ims["tiny.png"].size == (1, 1)
    ed = SimImageEditor()
    outs = [ed.edit(ims[n], "Make the person female.", seed=1) for n in cases]
    assert {o.outcome for o in outs} <= {"generated", "refused_policy", "refused_safety_filter", "blank_or_placeholder", "empty"}
    with FakeGemini(image_size=(32, 32)) as srv:
        gem = GeminiImages(base_url=srv.base_url, timeout=10)
        outs = [gem.edit(ims[n], "Make the person female.", seed=1) for n in cases]
    assert [o.outcome for o in outs] == ["generated"] * len(cases)
    counted["kind"] = "graceful"


def test_load_image_errors(tmp_path, counted):
    from acrb_nb.adapters.base import load_image
    _fails(lambda: load_image(tmp_path / "missing.png"), FileNotFoundError, "does not exist")
    (tmp_path / "zero.png").write_bytes(b"")
    _fails(lambda: load_image(tmp_path / "zero.png"), ValueError, "zero-byte", "regenerate or remove it")
    _fails(lambda: load_image(b"GIF89a-not-really"), ValueError, "not an image")
    png = _png(Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)))
    _fails(lambda: load_image(png[: len(png) // 2]), ValueError, "corrupt or truncated", "regenerate")
    counted["kind"] = "error"


# ------------------------------------------------------------------------------------------------------------------
# Fairness tables: columns, identity values, groups
FAIR = ROOT / "data" / "fairness" / "toxigen200.alt-profanity-check.csv"


def _toy(n=100, **cols):
    d = pd.DataFrame({"y": np.tile([0, 1], n // 2), "p": np.tile([0, 1, 1, 0], n // 4), "s": np.linspace(0, 1, n),
                      "black": np.r_[[1.0] * (n // 3), [0.0] * (n - n // 3)]})
    return d.assign(**cols)


@pytest.mark.parametrize("col", ["label", "identity", "prediction", "score"])
def test_fairness_missing_or_misspelled_column(col, counted):
    from acrb_nb.fairness import fairness_report
    df = pd.read_csv(FAIR)
    kw = dict(label_col="is_toxic", id_cols=["target_group"], pred_col="pred", score_col="score", analysis={"n_boot": 0})
    bad = {"label": ("label_col", "is_toxc"), "identity": ("id_cols", ["target_grp"]), "prediction": ("pred_col", "prd"),
           "score": ("score_col", "scores")}[col]
    kw[bad[0]] = bad[1]
    label, ids = kw.pop("label_col"), kw.pop("id_cols")
    name = bad[1][0] if isinstance(bad[1], list) else bad[1]
    _fails(lambda: fairness_report(df, label, ids, **kw), ValueError, name, "its columns are", "target_group")
    counted["kind"] = "error"


def test_fairness_nan_identity_values_are_unknown(counted):
    "Graceful (documented Jigsaw convention): NaN identity values are unknown — left out of both member and rest."
    from acrb_nb.fairness import fairness_report
    d = _toy(black=np.r_[[np.nan] * 10, [1.0] * 30, [0.0] * 60])
    I = fairness_report(d, "y", ["black"], pred_col="p", score_col="s", analysis={"n_boot": 0}).identities.iloc[0]
    assert (I.n_A1, I.n_A0, I.n_unknown) == (30, 60, 10)
    counted["kind"] = "graceful"


def test_fairness_out_of_range_identity_values(counted):
    from acrb_nb.fairness import fairness_report
    d = _toy(black=np.r_[[1.7] * 10, [1.0] * 30, [-0.2] * 60])
    _fails(lambda: fairness_report(d, "y", ["black"], pred_col="p", score_col="s", analysis={"n_boot": 0}), ValueError,
           "outside [0, 1]", "annotator fractions in [0, 1]")
    counted["kind"] = "error"


@pytest.mark.parametrize("members", [0, 1])
def test_fairness_empty_and_single_member_groups(members, counted):
    "Graceful: a group below min_group_size is reported as skipped with its size, never silently scored."
    from acrb_nb.fairness import fairness_report
    d = _toy(black=np.r_[[1.0] * members, [0.0] * (100 - members)])
    I = fairness_report(d, "y", ["black"], pred_col="p", score_col="s", analysis={"n_boot": 0}).identities.iloc[0]
    assert bool(I.skipped) and f"n={members}" in I.reason and "min_group_size" in I.reason
    counted["kind"] = "graceful"


def test_fairness_non_binary_labels(counted):
    from acrb_nb.fairness import fairness_report
    msg = _fails(lambda: fairness_report(_toy(y="maybe"), "y", ["black"], pred_col="p", score_col=None, analysis={"n_boot": 0}),
                 ValueError, "maybe")
    assert "positive_label" in msg or "0/1" in msg or "binary" in msg, msg
    counted["kind"] = "error"


# ------------------------------------------------------------------------------------------------------------------
# Toxicity scoring and IAT
def test_toxicity_misspelled_text_column_and_unknown_task(counted):
    from acrb_nb.toxicity.zeroshot import score_dataset, get_task
    df = pd.DataFrame({"comment_text": ["a", "b"]})
    _fails(lambda: score_dataset(df, "sim"), ValueError, "'text' not in the data", "comment_text", "text_col=")
    _fails(lambda: get_task("toxicty"), KeyError, "toxicty", "built-in tasks are")
    counted["kind"] = "error"


def test_iat_unknown_dimension_and_model(tmp_path, counted):
    from acrb_nb.iat import iat_study
    _fails(lambda: iat_study("sim", dimensions=["gendr"], run_dir=str(tmp_path / "a"), execution={"progress": False}), ValueError, "gendr")
    _fails(lambda: iat_study("sim-judge", dimensions=["gender"], words=2, pairs_per_combo=1, run_dir=str(tmp_path / "b"),
                             execution={"progress": False}), KeyError, "sim-judge", "Known")
    counted["kind"] = "error"


# ------------------------------------------------------------------------------------------------------------------
# Report templates: wrong papermill parameter types and names are refused before anything runs or is written
@pytest.mark.parametrize("template,params,needles", [
    ("acrb", {"n_base_prompts": "ten"}, ["expects int", "-p n_base_prompts"]),
    ("acrb", {"seed": 1.5}, ["expects int"]),
    ("acrb", {"n_base_prompt": 4}, ["unknown parameter", "n_base_prompts="]),
    ("fairness", {"id_cols": 3}, ["expects Union[str, list]", "-y 'id_cols:"]),  # a comma string is a list now (issue 28)
    ("fairness", {"threshold": "half"}, ["expects float"]),
])
def test_report_parameter_types(template, params, needles, tmp_path, counted):
    from acrb_nb.report import render_report, ParameterError
    out = tmp_path / "reports"
    _fails(lambda: render_report(ROOT / "nbs" / f"{template}.ipynb", parameters=params, out_dir=out), ParameterError, *needles)
    assert not out.exists()
    counted["kind"] = "error"
