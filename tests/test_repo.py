"""Repository invariants: pins agree across settings.ini / environment.yml / constraints.txt, README is fresh,
settings.ini has the keys the design card requires, CI runs the README's test command."""
import configparser, re, subprocess, sys
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
