"""Repository invariants: pins agree across settings.ini / environment.yml / constraints.txt, README is fresh,
settings.ini has the keys the design card requires, CI runs the README's test command."""
import configparser, json, re, subprocess, sys
from pathlib import Path
import yaml

ROOT = Path(__file__).resolve().parents[1]

def _settings():
    c = configparser.ConfigParser(delimiters=["="]); c.read(ROOT / "settings.ini"); return c["DEFAULT"]

def _reqs(key):
    return (_settings().get(key) or "").split()

def _name(spec):
    return re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower().replace("_", "-")

def test_settings_required_keys():
    s = _settings()
    assert s["lib_name"] == "acrb_nb"
    assert s["tst_flags"].split() == ["notest", "slow", "online", "gpu"]
    assert s["allowed_cell_metadata_keys"].strip() == "tags"
    assert s["jupyter_hooks"].strip() == "True"
    names = {_name(r) for r in _reqs("requirements")}
    for pkg in ["jupyterlab", "papermill", "nbdev", "torch", "torchvision", "transformers", "diffusers",
                "open-clip-torch", "captum", "openai", "google-genai", "pandas", "seaborn", "pyarrow"]:
        assert pkg in names, f"design-card package {pkg} missing from settings.ini requirements"
    assert "pytest" in {_name(r) for r in _reqs("dev_requirements")}

def test_torch_pair_pinned_everywhere():
    reqs = {_name(r): r for r in _reqs("requirements")}
    cons = {_name(l): l.strip() for l in (ROOT / "constraints.txt").read_text().splitlines() if l.strip() and not l.startswith("#")}
    for pkg in ("torch", "torchvision"):
        assert "==" in reqs[pkg], f"{pkg} must be pinned exactly in settings.ini"
        assert cons[pkg] == reqs[pkg], f"constraints.txt pins {cons[pkg]}, settings.ini {reqs[pkg]}"

def test_environment_yml_matches_settings():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    pip = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    pip = [p for p in pip if not p.startswith("-e")]
    want = _reqs("requirements") + _reqs("dev_requirements") + _reqs("nodeps_requirements")
    norm = lambda xs: sorted(x.lower().replace("_", "-") for x in xs)
    missing = set(norm(want)) - set(norm(pip)); extra = set(norm(pip)) - set(norm(want))
    assert not missing and not extra, f"environment.yml disagrees with settings.ini: missing {sorted(missing)}, extra {sorted(extra)}"

def test_constraints_cover_every_requirement():
    cons = {_name(l): l.strip() for l in (ROOT / "constraints.txt").read_text().splitlines() if l.strip() and not l.startswith("#")}
    for r in _reqs("requirements") + _reqs("dev_requirements") + _reqs("nodeps_requirements"):
        assert _name(r) in cons, f"{r} not pinned in constraints.txt"
        assert cons[_name(r)].split("==")[1] == r.split("==")[1], f"constraints.txt has {cons[_name(r)]}, settings.ini {r}"

def test_readme_is_fresh():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_readme.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout

def test_ci_runs_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^exec make test$", ci, re.M), ".ci/run must run exactly `make test`"
    assert "make test" in (ROOT / "README.md").read_text()

def test_setup_py_has_no_pkg_resources():
    assert "pkg_resources" not in (ROOT / "setup.py").read_text()

def test_structure_rules_hold():
    "Issue 16's rules: modules ≤ 700 lines, export cells ≤ 80 (median ≤ 25), no private cross-module imports, clean layers."
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "structure_report.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr

def test_no_machine_paths():
    "Nothing a test, notebook or module reads lives at a path of a build machine (issue 18)."
    pat = re.compile(r"""["'](/work/|/Users/|[^"']*/shared/(upstream-data|seeds))""")
    hits = []
    for sub in ("nbs", "acrb_nb", "tests", "bench", "tools", "data"):
        for p in (ROOT / sub).rglob("*"):
            if p.suffix in (".py", ".ipynb", ".yaml", ".yml", ".md") and p.is_file():
                hits += [f"{p.relative_to(ROOT)}:{i}" for i, l in enumerate(p.read_text(errors="ignore").splitlines(), 1) if pat.search(l)]
    assert not hits, hits[:10]

def test_entry_points_take_at_most_14_parameters():
    "Issue 29: a study entry point takes its domain parameters plus one value for how to run (and one for its analysis)."
    import inspect
    from acrb_nb.acrb.pipeline import run_acrb
    from acrb_nb.acrb.plan import plan_audit, plan_run
    from acrb_nb.toxicity.zeroshot import score_dataset
    from acrb_nb.toxicity.explain import explain_rows
    from acrb_nb.iat.pipeline import iat_study
    from acrb_nb.iat.plan import plan_iat
    from acrb_nb.fairness.report import fairness_report
    fns = [run_acrb, plan_audit, plan_run, score_dataset, explain_rows, iat_study, plan_iat, fairness_report]
    too_many = {f.__name__: len(inspect.signature(f).parameters) for f in fns if len(inspect.signature(f).parameters) > 14}
    assert not too_many, too_many

def test_run_options_are_documented_once():
    "Issue 29: the run options' parameter comments live in `runner.RunOptions` / `execution.Execution`, not in every signature."
    opts = ("max_workers", "limiter", "retry", "retry_failed", "progress", "budget", "execution")
    pat = re.compile(r"^\s*(?:def \w+\(|\*, )?\s*(\w+)\s*(?::[^=#]*)?(?:=[^#]*)?,?\s*#\s*(.+)$")
    seen = {}
    for p in sorted((ROOT / "acrb_nb").rglob("*.py")):
        if p.name == "_modidx.py": continue
        for i, line in enumerate(p.read_text().splitlines(), 1):
            m = pat.match(line)
            if m and m.group(1) in opts: seen.setdefault((m.group(1), m.group(2).strip()), []).append(f"{p.name}:{i}")
    repeated = {k: v for k, v in seen.items() if len(v) > 1}
    assert not repeated, repeated
    per_name = {o: [w for (n, _), ws in seen.items() if n == o for w in ws] for o in opts[:5]}
    assert all(len(w) <= 2 for w in per_name.values()), per_name   # RunOptions' field, and at most one pointer to it

def test_structure_checker_catches_each_rule(tmp_path):
    "Issue 29's rules fire on a small example of each: an import circle, a wide line, a `;` join, an unshown export cell."
    sys.path.insert(0, str(ROOT / "tools"))
    import structure_report as sr
    assert sr.import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    m = tmp_path / "m.py"
    m.write_text('"""a module docstring may be long: ' + "x" * 150 + '"""\nx = 1; y = 2\nz = "' + "a" * 150 + '"\ns = "a;b"\n')
    assert sr.long_and_joined(m) == ([3], [2])                    # line 1 is nbdev's summary; a ';' in a string is text
    cell = lambda src: {"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": None}
    nb = tmp_path / "demo.ipynb"
    nb.write_text(json.dumps({"cells": [cell("#| export\ndef f(): return 1"), cell("#| export\ndef g(): return 2"),
                                        cell("assert g() == 2"), cell("#| export\nimport os"),
                                        cell("#| export\n@patch\ndef h(self:int): return 3"), cell("assert (1).h() == 3")]}))
    assert sr.unshown_cells(nb) == ["f"]                          # imports-only cells need no show; `.h` counts for a patch
