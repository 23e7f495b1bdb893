"""What `make test` costs, printed by every run (issue 50).

    python tools/testcost.py phase NAME -- CMD ...   run CMD, record its wall and CPU seconds as phase NAME, exit as CMD does
    python tools/testcost.py nbtest ARGS ...         run nbdev_test ARGS, recording each notebook's wall and CPU seconds
    python tools/testcost.py report                  the 10 costliest notebooks and tests, then one line:
                                                     TEST-COST wall=… cpu=… notebooks=… pytest=… (seconds)

Records go to $TEST_COST_DIR (phases.jsonl, notebooks.jsonl, and tests-*.jsonl written by tests/conftest.py).
CPU seconds are user + system time of a process and of every descendant it waited for (`getrusage`): the kernels,
servers and command-line runs a notebook or a test starts are counted; daemons that outlive their parent (a Ray
cluster's raylets and workers) are not. `machine_cpu` is what the whole machine spent busy meanwhile (/proc/stat): on
an otherwise idle machine, everything the run cost, Ray included.
`nbtest` is nbdev's own `nbdev_test`, with two changes that do not change what runs: each notebook's cost is recorded,
and notebooks start costliest first (by tools/notebook_costs.json, measured here; unknown ones first), so that the two
workers do not end on a long notebook started last.
"""
import json, os, resource, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HINTS = ROOT / "tools" / "notebook_costs.json"


def _dir() -> Path:
    d = Path(os.environ.get("TEST_COST_DIR") or ROOT / ".test-cost")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _append(name: str, rec: dict):
    with open(_dir() / name, "a") as f: f.write(json.dumps(rec) + "\n")


def _machine_cpu() -> float:
    "CPU seconds the whole machine has spent busy since boot (/proc/stat; 0 where there is none)."
    try: f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError): return 0.0
    return (sum(f) - f[3] - (f[4] if len(f) > 4 else 0)) / os.sysconf("SC_CLK_TCK")   # all but idle and iowait


def phase(name: str, cmd: list) -> int:
    t0, c0, m0 = time.perf_counter(), _cpu(resource.RUSAGE_CHILDREN), _machine_cpu()
    rc = subprocess.call(cmd)
    _append("phases.jsonl", {"phase": name, "wall": round(time.perf_counter() - t0, 1),
                             "cpu": round(_cpu(resource.RUSAGE_CHILDREN) - c0, 1),
                             "machine_cpu": round(_machine_cpu() - m0, 1), "rc": rc})
    return rc


_ORIG = None


def _timed_test_nb(fn, *a, **kw):
    "nbdev's `test_nb`, with the notebook's wall and CPU seconds recorded (module level: the workers unpickle it by name)."
    t0, c0 = time.perf_counter(), _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN)
    ok, t = _ORIG(fn, *a, **kw)
    cpu = _cpu(resource.RUSAGE_SELF) + _cpu(resource.RUSAGE_CHILDREN) - c0
    _append("notebooks.jsonl", {"name": Path(fn).name, "ok": bool(ok), "wall": round(time.perf_counter() - t0, 1),
                                "cpu": round(cpu, 1)})
    return ok, t


def nbtest(argv: list):
    sys.path.insert(0, str(Path(__file__).parent))
    import testcost as me                   # the workers unpickle the wrapper by its module's name, which __main__ is not
    import nbdev.test as T
    hints = json.loads(HINTS.read_text()) if HINTS.exists() else {}
    me._ORIG, T.test_nb = T.test_nb, me._timed_test_nb               # parallel() looks it up in nbdev.test at call time
    costliest = lambda f: -hints.get(Path(f).name, 1e9)   # the notebooks: costliest first (its `sorted(files)`)
    T.sorted = lambda it, key=None, reverse=False: sorted(it, key=key or costliest, reverse=reverse)
    import argparse   # nbdev_test's own options (called from Python, fastcore's call_parse would ignore sys.argv)
    ap = argparse.ArgumentParser(prog="testcost.py nbtest")
    ap.add_argument("--path", action="append", help="a notebook or glob; several --path: exactly those notebooks")
    ap.add_argument("--flags", default=""); ap.add_argument("--n_workers", type=int)
    ap.add_argument("--timing", action="store_true"); ap.add_argument("--do_print", action="store_true")
    a = vars(ap.parse_args(argv))
    paths = a.pop("path") or [None]
    if len(paths) > 1:   # nbdev_test takes one path or glob: several notebooks are given to it as its glob's result
        T.nbglob = lambda *args, as_path=False, **kw: [Path(x).resolve() for x in paths]
    T.nbdev_test(path=paths[0], **a)


def _rows(pattern: str) -> list:
    out = []
    for p in sorted(_dir().glob(pattern)):
        out += [json.loads(l) for l in p.read_text().splitlines() if l.strip()]
    return out


def report():
    phases = {r["phase"]: r for r in _rows("phases.jsonl")}
    nbs, tests = _rows("notebooks.jsonl"), _rows("tests-*.jsonl")
    for title, rows, key in (("notebooks", nbs, "name"), ("tests", tests, "nodeid")):
        if not rows: continue
        print(f"costliest {title} (CPU s, wall s), of {len(rows)}:")
        for r in sorted(rows, key=lambda r: -r["cpu"])[:10]: print(f"  {r['cpu']:7.1f} {r['wall']:7.1f}  {r[key]}")
    over = [r for r in tests if r["cpu"] > r.get("budget", 30)]
    if over:
        print(f"over their CPU budget (tests/README.md): " + ", ".join(f"{r['nodeid']} {r['cpu']:.0f} > {r.get('budget', 30)}"
                                                                        for r in sorted(over, key=lambda r: -r["cpu"])))
    total = phases.get("test") or {}
    get = lambda k, f: (phases.get(k) or {}).get(f, float("nan"))
    print(f"TEST-COST wall={total.get('wall', float('nan')):.0f} cpu={total.get('cpu', float('nan')):.0f} "
          f"notebooks={get('notebooks', 'wall'):.0f} pytest={get('pytest', 'wall'):.0f} "
          f"notebooks_cpu={get('notebooks', 'cpu'):.0f} pytest_cpu={get('pytest', 'cpu'):.0f} "
          f"n_notebooks={len(nbs)} n_tests={len(tests)} machine_cpu={total.get('machine_cpu', float('nan')):.0f}")


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["phase"] and "--" in a: sys.exit(phase(a[1], a[a.index("--") + 1:]))
    elif a[:1] == ["nbtest"]: nbtest(a[1:])
    elif a[:1] == ["report"]: report()
    else: sys.exit(__doc__)
