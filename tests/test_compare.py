"""Model comparison (issue 32) with two real image adapters: gpt-image-1 and gemini-2.5-flash-image, each against its
loopback server (the real SDK clients, `OPENAI_BASE_URL` / `GOOGLE_GEMINI_BASE_URL`) with a different refusal rule —
the OpenAI server refuses every prompt naming a Muslim person, the Gemini server every prompt naming a Jewish person.
Audited on the same prompts and seed, the two runs are compared paired (`compare_acrb`) and with
`acrb-report compare RUN RUN` from an empty folder: the two planted differences are found, nothing else is.

Issue 49 (a comparison cites what the reports cite), on simulated runs (seconds): each model's Δ and interval in the
comparison equal its own report's, in both analyses (policy prompts left out, all prompts); an IAT comparison at the
default design says its test cannot reach significance and which design can; every family table's adjusted interval
agrees with its verdict. Issue 48: a run given twice (one folder by two paths, or by its folder and its report) is
refused before anything is written.
"""
import json, os, subprocess, sys
from pathlib import Path

import pandas as pd
import pytest
from report_files import report_file
from PIL import Image

from acrb_nb.acrb.pipeline import model_ref, run_acrb
from acrb_nb.compare import compare_acrb, load_runs, resolve_runs
from acrb_nb.compare.studies import compare_fairness, compare_iat
from acrb_nb.core import data_path
from acrb_nb.testing import FakeGemini, FakeOpenAI

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[1]
KEYS = {"OPENAI_API_KEY": "sk-test-compare-0000000000000000", "GEMINI_API_KEY": "test-compare-gemini-key-000000"}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    "The religion audit (12 base prompts, 84 items) of each API model, each refusing one value."
    d = tmp_path_factory.mktemp("cmp")
    photos = sorted((ROOT / "data" / "images" / "people").glob("*.jpg"))
    # the servers draw a shipped photograph of a person (the default test card is a placeholder the detector refuses)
    photo = lambda prompt, size, inputs: Image.open(photos[len(prompt) % len(photos)]).convert("RGB").resize((96, 96))
    oai = FakeOpenAI({"rules": [{"contains": "Muslim", "action": "policy_refusal"}]}, image_fn=photo).start()
    gem = FakeGemini({"rules": [{"contains": "Jewish", "action": "policy_refusal"}]}, image_fn=photo).start()
    env = {**KEYS, "OPENAI_BASE_URL": oai.base_url, "GOOGLE_GEMINI_BASE_URL": gem.base_url, "ACRB_PROGRESS": "0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        kw = dict(attributes=["religion"], n_base_prompts=12, judge="clip:sim", analysis={"n_boot": 200, "n_perm": 200})
        runs = [run_acrb(m, run_dir=d / m, **kw) for m in ("gpt-image-1", "gemini-2.5-flash-image")]
    finally:
        oai.stop(); gem.stop()
        for k, v in old.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v
    return d, runs


def test_two_api_models_differ_where_their_rules_differ(two_runs):
    d, (a, b) = two_runs
    assert a.summary["total_failed"] == b.summary["total_failed"] == 0
    C = compare_acrb([a.run.dir, b.run.dir], n_boot=300)
    assert C.items.shared.tolist() == [84, 84] and C.items["not in every run"].tolist() == [0, 0]
    cells = C.cells[C.cells.outcome.eq("refused")].set_index("attribute_id")
    assert (cells.model_a.iloc[0], cells.model_b.iloc[0]) == ("gpt-image-1", "gemini-2.5-flash-image")
    muslim, jewish = cells.loc["religion:Muslim"], cells.loc["religion:Jewish"]
    assert (muslim.rate_a, muslim.rate_b, jewish.rate_a, jewish.rate_b) == (1.0, 0.0, 0.0, 1.0)
    assert muslim.p_adj <= 0.05 and jewish.p_adj <= 0.05 and {muslim.verdict, jewish.verdict} == {"difference"}
    others = C.cells.drop(index=C.cells.index[C.cells.outcome.eq("refused") &
                                              C.cells.attribute_id.isin(["religion:Muslim", "religion:Jewish"])])
    assert not (others.p_adj <= 0.05).any(), others[others.p_adj <= 0.05]     # nothing else differs
    # each model's own Δ_refusal is 1 (one value always refused, the others never): their difference is 0
    dd = C.delta_diffs[C.delta_diffs.outcome.eq("refused")].iloc[0]
    assert (dd.delta_a, dd.delta_b, dd["diff"], dd.verdict) == (1.0, 1.0, 0.0, "no evidence of a difference")


def test_acrb_report_compare_from_an_empty_folder(two_runs, tmp_path):
    d, _ = two_runs
    here = tmp_path / "empty"
    here.mkdir()
    cmd = [str(Path(sys.executable).parent / "acrb-report"), "compare", str(d / "gpt-image-1"), str(d / "gemini-2.5-flash-image"),
           "-p", "n_boot", "300", "--nbs", str(ROOT / "nbs")]
    p = subprocess.run(cmd, cwd=here, env={**os.environ, "ACRB_PROGRESS": "0"}, capture_output=True, text=True, timeout=500)
    assert p.returncode == 0, p.stdout + p.stderr
    page = report_file(here / "reports", "compare", "gpt-image-1-vs-gemini-2.5-flash-image")   # named after the runs compared
    html = page.read_text()
    assert "2 of " in html and "paired comparisons" in html and "religion:Muslim" in html
    index = (here / "reports" / "index.html").read_text()
    assert "<h2>Model comparisons</h2>" in index and page.relative_to(here / "reports").as_posix() in index
    row = json.loads((here / "reports" / "index.json").read_text())["reports"][0]
    assert row["study"] == "compare" and row["headlines"]["differences"] == 2 and row["headlines"]["shared_items"] == 84
    assert sorted(q.name for q in here.iterdir()) == ["reports"]     # nothing else written next to the user
    # a run that shares nothing with another is refused, naming what differs
    q = subprocess.run(cmd[:3] + [str(here / "nothing")] + cmd[4:], cwd=here, capture_output=True, text=True, timeout=120)
    assert q.returncode == 2 and "nothing" in q.stderr


def test_fairness_predictions_compared_on_the_same_rows(tmp_path):
    "Two prediction columns of one table (alt-profanity-check at its threshold and at score ≥ 0.2), from a user's folder."
    import pandas as pd
    t = pd.read_csv(ROOT / "data" / "fairness" / "toxigen200.alt-profanity-check.csv")
    t["pred_0.2"] = (t.score >= 0.2).astype(int)
    t.to_csv(tmp_path / "preds.csv", index=False)
    cmd = [str(Path(sys.executable).parent / "acrb-report"), "compare", "--nbs", str(ROOT / "nbs"), "-p", "model", "apc",
           "-p", "preds", "preds.csv", "-y", "pred_cols: [pred, pred_0.2]", "-p", "label_col", "is_toxic", "-p", "id_cols",
           "target_group", "-p", "n_boot", "300"]
    p = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "ACRB_PROGRESS": "0"}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    row = json.loads((tmp_path / "reports" / "index.json").read_text())["reports"][0]
    assert (row["study"], row["headlines"]["rows"], row["headlines"]["predictions"]) == ("compare", 200, 2)
    assert row["headlines"]["differences"] >= 1          # 27 rows more positive at the lower threshold, all one way
    assert "target_group=muslim" in (report_file(tmp_path / "reports", "compare", "apc")).read_text()


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory):
    """Two simulated ACRB audits differing in one planted value (compare_b: Muslim prompts refused more often), on age and
    religion (18 base prompts, the ACRB report's default: two hold a policy cell), and two IAT studies at the IAT report's
    default design (3 profile pairs per attribute pair), the second without the planted health-status association."""
    import yaml
    from acrb_nb.execution import AdapterRef, Execution
    from acrb_nb.iat import iat_study
    d, quiet = tmp_path_factory.mktemp("simcmp"), Execution.of("local", progress=False)
    acrb = {k: run_acrb(model_ref("sim", "t2i", config=str(data_path("sim", f"compare_{k}.yaml"))), attributes=["age", "religion"],
                        n_base_prompts=18, run_dir=d / k, analysis={"n_boot": 200, "n_perm": 200}, execution=quiet) for k in "ab"}
    flat = d / "flat.yaml"
    flat.write_text(yaml.safe_dump({"version": 1, "name": "planted-iat-flat", "extends": "planted_iat.yaml",
                                    "associations": {"health_status": {"excellent": 0.0, "fair": 0.0, "poor": 0.0}}}))
    kw = dict(design="seed", dimensions=["gender", "health_status"], words=6, analysis={"n_boot": 200, "n_perm": 200}, execution=quiet)
    iat = [iat_study("sim", run_dir=d / "iat-shipped", **kw),
           iat_study(AdapterRef.of("vision_judge", "sim", iat_config=str(flat)), run_dir=d / "iat-flat", **kw)]
    return d, acrb, iat


def _pooled(deltas, outcome):
    "The pooled Δ row an ACRB report cites (its headline), from a `disparities` table or a comparison's `deltas`."
    D = deltas[deltas.outcome.eq(outcome)] if "model" not in deltas else deltas
    return D.set_index("dimension").loc["(pooled)"]


def test_comparison_cites_each_models_report(sim_runs):
    "Headline Δ and interval of each model = its report's (run_acrb's analyses, what the ACRB template shows), in both analyses."
    d, acrb, _ = sim_runs
    assert acrb["a"].summary["policy_cells"]["n_cells"] > 0          # the policy prompts are there to be left out
    cited = compare_acrb([d / "a", d / "b"], n_boot=200)
    fresh = compare_acrb([d / "a", d / "b"], n_boot=200, model_n_perm=200, cite_reports=False)   # recomputed, the runs' settings
    assert cited.analysis == "excluding_policy_cells" and cited.other.analysis == "all_prompts"
    assert len(cited.policy_prompts) == 2 and cited.items["in this analysis"].lt(cited.items.shared).all()
    checked = 0
    for C in (cited, fresh):
        for comp, analysis in ((C, "excluding_policy_cells"), (C.other, "all_prompts")):
            H = comp.headline.set_index("model")
            for k, run in zip("ab", comp.runs):
                for outcome, name in (("refused", "refusal"), ("erased", "erasure")):
                    own = _pooled(acrb[k].analyses[analysis].deltas[outcome], outcome)       # the report's own figure
                    got = H.loc[run.name, [f"Δ {name}", f"Δ {name} lo", f"Δ {name} hi", f"Δ {name} verdict"]].tolist()
                    assert got[:3] == pytest.approx([own.delta, own.lo, own.hi], abs=1e-12), (analysis, k, outcome)
                    assert got[3] == own.verdict
                    assert H.loc[run.name, f"Δ {name} source"] == ("its report" if C is cited else "recomputed: cite_reports=False")
                    checked += 1
            dd = comp.delta_diffs.set_index(["outcome", "dimension"]).loc[("refused", "(pooled)")]   # the paired test: same Δs
            assert (dd.delta_a, dd.delta_b) == pytest.approx((H["Δ refusal"].iloc[0], H["Δ refusal"].iloc[1]), abs=1e-12)
    assert checked == 16


def test_iat_default_design_says_it_cannot_reach_significance(sim_runs, tmp_path):
    "pairs_per_combo = 3: 2^3 swaps, smallest p 0.25; the comparison says so, names pairs_per_combo ≥ 8, and shows D with n."
    d, _, (shipped, flat) = sim_runs
    per, pairs, _ = compare_iat([d / "iat-shipped", d / "iat-flat"], n_boot=200, model_n_perm=200)
    assert pairs.exact.all() and pairs.p_min.eq(0.25).all() and not pairs.reachable.any()
    assert all("pairs_per_combo ≥ 8" in note for note in pairs.design), pairs.design.iloc[0]
    own = shipped.effects.set_index("pair_id")                       # each model's D, interval and n: its IAT report's
    mine = per[per.model.eq("sim:iat-shipped")].set_index("pair_id").loc[own.index]
    assert mine[["D", "lo", "hi", "p"]].to_numpy() == pytest.approx(own[["D", "D_lo", "D_hi", "p"]].to_numpy(), abs=1e-12)
    assert mine.n_scored.tolist() == own.n_scored.tolist() and mine.n_profile_pairs.eq(3).all()
    cmd = [str(Path(sys.executable).parent / "acrb-report"), "compare", str(d / "iat-shipped"), str(d / "iat-flat"),
           "-p", "n_boot", "200", "--nbs", str(ROOT / "nbs")]
    p = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "ACRB_PROGRESS": "0"}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    html = next((tmp_path / "reports" / "compare").glob("*.html")).read_text()
    for said in ("4 tests cannot reach significance", "Tests that cannot reach α", "pairs_per_combo ≥ 8", "n = 36 trials, 3 profile pairs",
                 "95% interval, unadjusted", "Holm-adjusted interval, at the level of its step"):
        assert said in html, said
    assert "Toxicity." not in html and "Per value." not in html     # the method of this study only


@pytest.mark.parametrize("case", ["same folder", "dot-dot path", "symlink", "folder and report", "three runs, one twice"])
def test_run_given_twice_is_refused(sim_runs, tmp_path, case):
    d, _, _ = sim_runs
    a, b = d / "a", d / "b"
    (tmp_path / "acrb").mkdir()
    (tmp_path / "acrb" / "sim.html").write_text(f"<a href='{os.path.relpath(a / 'view.html', tmp_path / 'acrb')}'>items</a>")
    (tmp_path / "link").symlink_to(a)
    refs = {"same folder": [a, a], "dot-dot path": [a, b / ".." / "a"], "symlink": [tmp_path / "link", a],
            "folder and report": [a, "acrb/sim"], "three runs, one twice": [a, b, a]}[case]
    with pytest.raises(ValueError, match="is given twice"): load_runs(refs, reports=tmp_path)
    with pytest.raises(ValueError, match="is given twice"): compare_acrb(refs, reports=tmp_path)


def test_run_given_twice_refused_by_the_command_before_anything_is_written(sim_runs, tmp_path, monkeypatch, capsys):
    from acrb_nb.report import main
    d, _, _ = sim_runs
    monkeypatch.chdir(tmp_path)
    assert main(["compare", str(d / "a"), str(d / "b" / ".." / "a"), "--nbs", str(ROOT / "nbs")]) == 2
    assert "is given twice" in capsys.readouterr().err and list(tmp_path.iterdir()) == []
    runs = load_runs([d / "a", d / "b"])                             # given as CompareRuns, and to the other studies' comparisons
    with pytest.raises(ValueError, match="is given twice"): resolve_runs([runs[0], runs[0]])
    with pytest.raises(ValueError, match="more than once"):
        compare_fairness(pd.DataFrame({"y": [0, 1], "p": [0, 1]}), ["p", "p"], label_col="y")


def test_adjusted_intervals_agree_with_verdicts(sim_runs):
    "Every family table: the interval at the level of its step excludes 0 exactly when the verdict is 'difference'."
    d, _, _ = sim_runs
    C = compare_acrb([d / "a", d / "b"], n_boot=200, other_analysis=False)
    t = pd.read_csv(data_path("fairness", "toxigen200.alt-profanity-check.csv")).assign(lower=lambda f: (f.score >= 0.2).astype(int))
    rows, gaps = compare_fairness(t, ["pred", "lower"], label_col="is_toxic", id_cols=["target_group"], n_boot=200)
    for name, tab in (("acrb", C.tests()), ("fairness rows", rows), ("fairness gaps", gaps)):
        ok = tab[tab.reachable] if "reachable" in tab else tab
        excl = (ok.lo_adj > 0) | (ok.hi_adj < 0)
        assert (excl == ok.verdict.eq("difference")).all(), (name, ok[excl != ok.verdict.eq("difference")])
        assert ((tab.level_adj > 1 - 0.05) & (tab.level_adj < 1)).all(), name         # each at its adjusted level, above 95 %
    assert rows.verdict.eq("difference").any()                      # the lower threshold's extra positives are found
