"""Bring your own (issue 28): grounded I2I that works with the defaults and with a user's own folder, and an ACRB plan
that prices the run that was asked for (items 1 and 4).

Each test runs the command line (`python -m acrb_nb.report acrb ...`) as a subprocess in an empty temporary folder,
as a new user would:

- `-p model sim -p mode i2i` and nothing else runs; the report says how many source images were checked, kept and
  excluded, and every kept one holds a person the detector finds (checked on the shipped set through the library);
- a folder without a person stops before any model call (counted at a loopback server standing in for the API);
- `-p source_dir mine` (relative to where the user runs), a folder of the user's own files of every kind —
  photographs of people, an image without a person, and (issue 48, item 5) a truncated JPEG, a text file named .jpg, a
  zero-byte file, bytes Pillow cannot decode, TIFF and WebP copies, a 6000 x 6000 photograph — renders in one report:
  the image without a person is excluded, counted and named, each unreadable file is excluded with its reason and
  listed like it, none is ever edited, the others are read, the large one at 1024 px (sources.csv gives both sizes);
- plan-only prices the requested run: its calls are the calls a real run of the same parameters makes, and every
  number is rounded for people.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from report_files import report_file

from reliability_helpers import Loopback  # a loopback API that refuses every key and counts the requests

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[1]
PEOPLE = ROOT / "data" / "images" / "people"
PUBLIC = ROOT / "data" / "images" / "public"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "MPLBACKEND": "Agg", "ACRB_PROGRESS": "0"}


def cli(*args, cwd, env=None, timeout=550):
    "`acrb-report acrb ARGS` from `cwd`; the CompletedProcess."
    return subprocess.run([sys.executable, "-m", "acrb_nb.report", "acrb", *map(str, args)], cwd=cwd, env=env or ENV,
                          capture_output=True, text=True, timeout=timeout)


def text_of(html_path: Path) -> str:
    "The visible text of a rendered report, whitespace collapsed."
    import html
    s = re.sub(r"<style.*?</style>|<script.*?</script>", " ", html_path.read_text(), flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", s)))


def only(cwd: Path, pattern: str) -> Path:
    (p,) = list((cwd / "runs").rglob(pattern))
    return p


SOURCES_LINE = re.compile(r"Source images in .*?: (\d+) checked, (\d+) kept, (\d+) excluded \(no person found\)")


# ------------------------------------------------------------------------------------------------------ item 1
def test_i2i_defaults_run_on_photographs_of_people(tmp_path):
    r = cli("-p", "model", "sim", "-p", "mode", "i2i", cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    text = text_of(report_file(tmp_path / "reports", "acrb", "sim"))
    m = SOURCES_LINE.search(text)
    assert m, "the report must say how many source images were checked, kept and excluded"
    from acrb_nb.acrb.sources import DEFAULT_SOURCES, PersonDetector, IMAGE_EXTS
    shipped = sorted(p.name for p in DEFAULT_SOURCES.iterdir() if p.suffix.lower() in IMAGE_EXTS)
    assert DEFAULT_SOURCES.resolve() == PEOPLE.resolve() and len(shipped) >= 3
    assert tuple(map(int, m.groups())) == (len(shipped), len(shipped), 0)
    srcs = pd.read_csv(only(tmp_path, "sources.csv"))
    assert sorted(srcs.source_id) == shipped and srcs.kept.all()
    det = PersonDetector()  # the kept ones hold a person the detector finds, asked again through the library
    assert all(det.detect(DEFAULT_SOURCES / s)["has_person"] for s in srcs.source_id[srcs.kept])
    s3 = pd.read_parquet(only(tmp_path, "stage3_evaluation.parquet"))
    assert s3.base_id.nunique() == 18 and s3.domain.nunique() == 9                  # n_base_prompts=18, stratified by domain
    assert s3.groupby("base_id").source_id.nunique().max() == 1                      # one photograph per base prompt
    assert s3.drop_duplicates("base_id").source_id.value_counts().tolist() == [6, 6, 6]   # reused evenly
    assert (s3.cluster == s3.base_id).all() and s3.text.str.startswith("Edit this photo so that it shows").all()
    assert set(s3.source_id) <= set(srcs.source_id[srcs.kept])


def test_folder_without_a_person_stops_before_any_call(tmp_path):
    things = tmp_path / "things"
    things.mkdir()
    for n in ("brick.jpg", "chelsea.jpg", "coins.jpg"): shutil.copy(PUBLIC / n, things / n)
    srv = Loopback()
    try:
        env = {**ENV, "OPENAI_BASE_URL": srv.url, "OPENAI_API_KEY": "dummy-key-for-the-loopback"}
        r = cli("-p", "model", "gpt-image-1", "-p", "mode", "i2i", "-p", "source_dir", "things", "-p", "attributes", "gender",
                "-p", "judge", "clip:sim", "-p", "n_boot", "200", cwd=tmp_path, env=env)
    finally:
        srv.close()
    out = r.stdout + r.stderr
    assert r.returncode != 0, out[-2000:]
    assert "no photograph of a person in" in out, out[-3000:]
    assert "coins.jpg: no face found" in out and "leave source_dir unset" in out   # what was found, and what to do
    assert srv.count == 0, f"{srv.count} requests reached the API"
    assert not (tmp_path / "runs").exists(), "checked before a run folder is made"



# ------------------------------------------------------------------------------------------------------ issue 48, item 5
def _own_files(folder: Path) -> dict:
    "Write the cases into `folder`, from one shipped photograph: file name -> (kept, what sources.csv says about it)."
    from PIL import Image
    raw = (PEOPLE / "grace_hopper.jpg").read_bytes()
    im = Image.open(PEOPLE / "grace_hopper.jpg").convert("RGB")
    (folder / "cut.jpg").write_bytes(raw[: len(raw) // 2])
    (folder / "notes.jpg").write_text("a text file, not a photograph\n")
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "garbage.png").write_bytes(bytes(range(256)) * 4)
    im.save(folder / "hopper.tif")
    im.save(folder / "hopper.TIFF", compression="tiff_lzw")
    im.save(folder / "hopper.webp", quality=90)
    im.resize((6000, 6000), Image.Resampling.BICUBIC).save(folder / "hopper_6000.jpg", quality=90)
    w, h = im.size
    return {"cut.jpg": (False, "excluded: unreadable: truncated or corrupt"),
            "notes.jpg": (False, "excluded: unreadable: not an image Pillow can read"),
            "empty.jpg": (False, "excluded: unreadable: empty file (0 bytes)"),
            "garbage.png": (False, "excluded: unreadable: not an image Pillow can read"),
            "hopper.tif": (True, (w, h, w, h)), "hopper.TIFF": (True, (w, h, w, h)), "hopper.webp": (True, (w, h, w, h)),
            "hopper_6000.jpg": (True, (6000, 6000, 1024, 1024))}


@pytest.fixture(scope="module")
def own_folder(tmp_path_factory):
    """One report over every case of a user's own folder, given relative to where the user runs (`-p source_dir mine`):
    photographs of people, an image without a person (coins.jpg) and the files of `_own_files`. Two tests read it (one
    render, not two: issue 50)."""
    cwd = tmp_path_factory.mktemp("own")
    faces = cwd / "mine"
    faces.mkdir()
    for p in sorted(PEOPLE.glob("*.jpg")): shutil.copy(p, faces / p.name)
    shutil.copy(PUBLIC / "coins.jpg", faces / "coins.jpg")               # no person: excluded, counted, named
    cases = _own_files(faces)
    r = cli("-p", "model", "sim", "-p", "mode", "i2i", "-p", "source_dir", "mine", "-p", "attributes", "gender",
            "-p", "n_base_prompts", "7", "-p", "n_boot", "200", cwd=cwd)  # 7 photographs of people: every one checked
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    srcs = pd.read_csv(only(cwd, "sources.csv")).set_index("source_id")
    return dict(cwd=cwd, faces=faces, cases=cases, srcs=srcs, text=text_of(report_file(cwd / "reports", "acrb", "sim")),
                s3=pd.read_parquet(only(cwd, "stage3_evaluation.parquet")))


def test_users_own_folder_relative_path_person_check(own_folder):
    "The folder relative to where the user runs; the image without a person excluded, counted, named and never edited."
    o = own_folder
    spec = json.loads(only(o["cwd"], "spec.json").read_text())
    assert Path(spec["params"]["source_dir"]) == o["faces"].resolve()          # the user's folder, not one under nbs/
    srcs, text, s3 = o["srcs"], o["text"], o["s3"]
    assert sorted(srcs.index) == sorted([*o["cases"], "astronaut.jpg", "camera.jpg", "grace_hopper.jpg", "coins.jpg"])
    assert not srcs.kept["coins.jpg"] and srcs.readable["coins.jpg"] and srcs.reason["coins.jpg"].startswith("excluded: no face found")
    m = SOURCES_LINE.search(text)
    assert m and tuple(map(int, m.groups())) == (8, 7, 1), m and m.group(0)   # 3 shipped people + 4 readable copies, coins
    assert "coins.jpg (no face found" in text[text.index("Excluded, and never edited:"):]
    assert "coins.jpg" not in set(s3.source_id) and len(s3) == 7 * 4                # 7 base prompts × (3 gender values + neutral)


def test_own_folder_with_unreadable_tiff_webp_and_large_files_renders(own_folder):
    "Unreadable files excluded with their reason and listed, TIFF and WebP read, 6000 px reduced to 1024."
    cases, srcs, text, s3 = own_folder["cases"], own_folder["srcs"], own_folder["text"], own_folder["s3"]
    for name, (kept, what) in cases.items():
        row = srcs.loc[name]
        assert bool(row.kept) == kept and bool(row.readable) == kept, (name, row.to_dict())
        if kept: assert tuple(int(row[c]) for c in ("width", "height", "used_width", "used_height")) == what, (name, row.to_dict())
        else: assert row.reason.startswith(what) and row.reason.endswith("replace or remove the file"), (name, row.reason)
    assert "7 kept, 1 excluded (no person found), 4 excluded (unreadable)" in text
    gone = text[text.index("Excluded, and never edited:"):]
    for name, (kept, what) in cases.items():
        if not kept: assert f"{name} ({what.removeprefix('excluded: ')}" in gone, name   # listed with its reason
    assert "hopper_6000.jpg (6000×6000 → 1024×1024)" in text
    assert set(s3.source_id) == set(srcs.index[srcs.kept]) and not set(s3.source_id) & {n for n, (k, _) in cases.items() if not k}

# ------------------------------------------------------------------------------------------------------ item 4
NOISE = re.compile(r"\d\.\d{5,}")  # float noise: 1.7220000000000002, 3.990000


def _plan_section(text: str) -> str:
    return text[text.index("Audit plan"):]


@pytest.mark.parametrize("mode", ["t2i", "i2i"])
def test_plan_only_prices_the_requested_run(tmp_path, mode):
    from acrb_nb.report import read_headlines
    args = ["-p", "model", "sim", "-p", "mode", mode, "-p", "attributes", "gender", "-p", "n_base_prompts", "5",
            "-p", "images_per_prompt", "2", "-p", "n_boot", "200"]
    plan_dir, run_dir = tmp_path / "plan", tmp_path / "run"
    plan_dir.mkdir(); run_dir.mkdir()
    r = cli(*args, "-p", "plan_only", "True", cwd=plan_dir)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert not (plan_dir / "runs").exists()                                    # nothing run
    h = read_headlines(report_file(plan_dir / "reports", "acrb", "sim", ".ipynb"))
    text = text_of(report_file(plan_dir / "reports", "acrb", "sim"))
    assert text.count("not run") == 1 and "Stage II: outcomes" not in text     # one notice, later cells dropped
    assert text.index("This run") < text.index("The power-target design")          # the requested run first
    assert not NOISE.search(_plan_section(text)), NOISE.search(_plan_section(text)).group(0)
    assert h["generator_calls"] == 5 * 2 * 4 and h["cost_usd"] == 0.0 and h["wall_time"] == "unknown"
    r2 = cli(*args, cwd=run_dir)                                                # the same parameters, run for real
    assert r2.returncode == 0, (r2.stdout + r2.stderr)[-3000:]
    s3 = pd.read_parquet(only(run_dir, "stage3_evaluation.parquet"))
    assert len(s3) == s3.key.nunique() == h["generator_calls"]                  # the plan's calls are the run's calls


def test_plan_only_api_model_cost_and_time_for_people(tmp_path):
    from acrb_nb.report import read_headlines
    from acrb_nb.acrb.plan import plan_run
    r = cli("-p", "model", "gpt-image-1", "-p", "plan_only", "True", cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    h = read_headlines(report_file(tmp_path / "reports", "acrb", "gpt-image-1", ".ipynb"))
    text = text_of(report_file(tmp_path / "reports", "acrb", "gpt-image-1"))
    want = plan_run("gpt-image-1", n_base_prompts=18, n_judges=1).plan                # the template's defaults
    assert h["generator_calls"] == want["generator_calls"] == 18 * 24
    assert h["cost_usd"] == want["cost_usd_expected"] == round(h["cost_usd"], 2) > 0  # dollars and cents
    assert h["wall_time"] == want["wall_time"] and re.fullmatch(r"(\d+ h \d\d min|\d+ min)", h["wall_time"])
    assert f"${h['cost_usd']:,.2f}" in text and f"wall time {h['wall_time']}" in text
    assert not NOISE.search(_plan_section(text))
