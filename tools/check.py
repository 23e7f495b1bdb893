"""`make check`: the fast loop before a commit (issue 50) — the notebooks and tests your change touches, and every test
not marked slow, in a few minutes; `make test` (what CI runs) stays the whole suite.

What "your change" is: the files that differ from where your branch left main (`git merge-base HEAD origin/main`, or
`main`, or HEAD when neither exists), staged, unstaged and untracked alike. A notebook runs when it changed or when the
library module exported from it changed; a test file runs whole when it changed; a change to tests/conftest.py,
tools/ or the Makefile runs every test not marked slow (which `make check` runs anyway).

    python tools/check.py            # run it
    python tools/check.py --dry-run  # say what would run
"""
import os, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git(*args) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def changed_files() -> list:
    base = next((b for b in ("origin/main", "main") if _git("rev-parse", "--verify", "-q", b).strip()), None)
    since = _git("merge-base", "HEAD", base).strip() if base else ""
    names = set()
    for args in ((["diff", "--name-only", since]) if since else ["diff", "--name-only", "HEAD"],
                 ["diff", "--name-only", "--cached"], ["ls-files", "--others", "--exclude-standard"]):
        names |= {n for n in _git(*args).splitlines() if n.strip()}
    return sorted(n for n in names if (ROOT / n).exists())


def _notebook_of(module: Path):
    "The notebook a generated module says it is exported from (its 'File to edit' line)."
    try: head = module.read_text(encoding="utf-8")[:600]
    except OSError: return None
    m = re.search(r"File to edit: \.\./(?:\.\./)*nbs/([^\s]+\.ipynb)", head)
    return f"nbs/{m.group(1)}" if m else None


def plan(files: list) -> tuple:
    "(notebooks, test files) the change touches."
    nbs, tests = set(), set()
    for f in files:
        p = Path(f)
        if p.parts[:1] == ("nbs",) and p.suffix == ".ipynb": nbs.add(f)
        elif p.parts[:1] == ("acrb_nb",) and p.suffix == ".py" and (nb := _notebook_of(ROOT / p)): nbs.add(nb)
        elif p.parts[:1] == ("tests",) and p.name.startswith("test_") and p.suffix == ".py": tests.add(f)
    return sorted(n for n in nbs if (ROOT / n).exists()), sorted(tests)


def main(argv=None) -> int:
    dry = "--dry-run" in (argv if argv is not None else sys.argv[1:])
    nbs, tests = plan(changed_files())
    py, bin_ = sys.executable, Path(sys.executable).parent
    workers = os.environ.get("PYTEST_WORKERS", "2")
    steps = [("sync check", ["bash", "tools/sync_check.sh"])]
    if nbs: steps.append((f"{len(nbs)} notebook(s)", [py, "tools/testcost.py", "nbtest", *[a for n in nbs for a in ("--path", n)],
                                                      "--flags", "slow", "--n_workers", "2", "--timing"]))
    pytest = [str(bin_ / "pytest"), "-q", "-n", workers, "--dist", "loadgroup"]
    steps.append(("tests not marked slow", [*pytest, "-m", "not slow", "tests/"]))
    if tests: steps.append(("the slow tests of the changed test files", [*pytest, "-m", "slow", *tests]))
    print("make check: " + (f"{len(nbs)} changed notebook(s): {', '.join(Path(n).stem for n in nbs)}" if nbs else "no notebook changed")
          + (f"; changed tests: {', '.join(tests)}" if tests else ""))
    if dry:
        for name, cmd in steps: print(f"  would run {name}: {' '.join(cmd)}")
        return 0
    env = {**os.environ, "PATH": f"{bin_}:{os.environ.get('PATH', '')}"}
    for name, cmd in steps:
        print(f"== {name}", flush=True)
        if subprocess.call(cmd, cwd=ROOT, env=env) != 0:
            print(f"make check: FAILED at {name}", file=sys.stderr)
            return 1
    print("make check: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
