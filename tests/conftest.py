"""Shared pytest set-up: the `slow` marker, an offline environment, and the reliability summary printed at the end.

Reliability tests (tests/test_reliability_*.py) report their figures with the `reliability` fixture:

    def test_x(reliability):
        ...
        reliability.add("faults", calls=512, refusals_misclassified=0)

and `pytest_terminal_summary` prints one line per area, e.g.

    RELIABILITY kill-resume: 5 pipelines, 15 kills, 0 lost, 0 duplicated, 0 repeated calls, metrics identical 5/5 [4/4 tests passed]

`-m "not slow"` deselects the long cases for a quick local run; CI runs everything (`pytest tests/`).
"""
import functools, json, os, re
from collections import defaultdict
from pathlib import Path

import pytest

# Hubs are unreachable in tests: fail fast instead of retrying (child processes inherit this).
for _k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"): os.environ.setdefault(_k, "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# Under pytest-xdist (`-n 2`) the workers share the cores: each gets its share of threads (set before torch is imported,
# and inherited by the kernels, forks and servers a test starts), so OpenMP threads do not spin against each other.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

AREAS = ("kill-resume", "faults", "bad-inputs", "secrets", "determinism")


class Reliability:
    "Figures per area: numbers are summed, sets are unioned, lists extended, dicts merged, other values kept (last wins)."
    def __init__(self):
        self.figures = defaultdict(dict)
        self.tests = defaultdict(lambda: {"passed": 0, "failed": 0, "skipped": 0})

    def add(self, area, **figures):
        if area not in AREAS: raise ValueError(f"unknown reliability area {area!r}; use one of {AREAS}")
        f = self.figures[area]
        for k, v in figures.items():
            if isinstance(v, dict): f[k] = {**f.get(k, {}), **v}
            elif isinstance(v, bool) or not isinstance(v, (int, float, set, list)): f[k] = v
            elif isinstance(v, set): f[k] = f.get(k, set()) | v
            elif isinstance(v, list): f[k] = f.get(k, []) + v
            else: f[k] = f.get(k, 0) + v

    def line(self, area) -> str:
        f, t = self.figures.get(area, {}), self.tests.get(area)
        g = lambda k, d=0: len(f[k]) if isinstance(f.get(k), set) else f.get(k, d)
        if area == "kill-resume":
            body = (f"{g('pipelines')} pipelines, {g('kills')} kills, {g('lost')} lost, {g('duplicated')} duplicated, "
                    f"{g('repeated_calls')} repeated calls for finished items, metrics identical {g('identical')}/{g('compared')}"
                    + (f" (pipelines: {', '.join(sorted(f['pipelines']))})" if f.get("pipelines") else "")
                    + (f"; Ray cluster: {g('nodes_killed')} nodes killed mid-run, {g('node_items_lost')} items lost, "
                       f"{g('node_calls_repeated')} calls repeated; head killed {g('heads_killed')}×: stopped naming it, resumed locally"
                       if f.get("nodes_killed") or f.get("heads_killed") else ""))
        elif area == "faults":
            body = (f"{g('calls')} calls ({', '.join(f'{k} {v}' for k, v in sorted(f.get('calls_by_api', {}).items()))}), "
                    f"{g('transient')} transient faults, {g('transient_as_refusal')} counted as refusals, "
                    f"{g('refusals_ok')}/{g('refusals')} refusals+filtered classified correctly, "
                    f"manifest vs server log mismatches {g('log_mismatches')}, Retry-After honoured {g('retry_after_ok')}/{g('retry_after')}")
        elif area == "bad-inputs":
            body = (f"{g('cases')} cases, {g('clear_errors')} clear errors naming the fix, {g('graceful')} documented graceful "
                    f"handlings, {g('corrupted_runs')} existing runs corrupted")
        elif area == "secrets":
            body = (f"{g('templates')} report runs ({', '.join(sorted(f.get('template_names', set())))}), {g('files')} files "
                    f"scanned, {g('hits')} hits, {g('redacted')} redactions needed, {g('refused')}/{g('refusal_cases')} key "
                    f"parameters refused")
        else:
            body = (f"{g('configs')} configurations ({', '.join(sorted(f.get('config_names', set())))}), "
                    f"{g('identical')}/{g('compared')} artefacts byte-identical (Stage I prompts, item keys, metrics JSON)")
        status = "" if t is None else f" [{t['passed']}/{t['passed'] + t['failed']} tests passed" + (
            f", {t['skipped']} skipped]" if t["skipped"] else "]")
        return f"RELIABILITY {area}: {body}{status}"


_REL = Reliability()


@pytest.fixture(scope="session")
def reliability() -> Reliability:
    "The session's figure collector (see the module docstring)."
    return _REL


@pytest.fixture
def run_tmp(tmp_path):
    """A scratch folder for run folders and item stores: on tmpfs (/dev/shm) when there is one, else `tmp_path`.

    The stores fsync every item (SQLite synchronous=FULL), which costs seconds per run on a busy disk. What these tests
    kill is a *process*: the page cache survives SIGKILL, so tmpfs changes nothing about what they prove (power-loss
    durability is SQLite's job, not theirs)."""
    import shutil, tempfile
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path; return
    d = Path(tempfile.mkdtemp(prefix="acrb-rel-", dir=shm))
    try: yield d
    finally: shutil.rmtree(d, ignore_errors=True)


RAY_GROUP = "ray"


def _is_ray_test(nodeid: str) -> bool:
    return nodeid.split("::")[0].rsplit("/", 1)[-1].startswith("test_ray")


_MODULE_FIXTURES = re.compile(r"@pytest\.fixture\(\s*scope\s*=\s*[\"'](module|package|session)[\"']")


@functools.lru_cache(maxsize=None)
def _shares_fixtures(module: str) -> bool:
    "Whether a test module defines a fixture that lives longer than a test (a render, a run, a browser it computes once)."
    p = Path(__file__).resolve().parent.parent / module
    try: return bool(_MODULE_FIXTURES.search(p.read_text(encoding="utf-8")))
    except OSError: return False


def pytest_collection_modifyitems(config, items):
    "The Ray group is made of the test_ray* modules (see the scheduler below): a test using `local_ray` must live in one."
    stray = [i.nodeid for i in items if "local_ray" in getattr(i, "fixturenames", ()) and not _is_ray_test(i.nodeid)]
    if stray: raise pytest.UsageError(f"tests using local_ray must be in a tests/test_ray*.py module (one xdist group): {stray}")


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` that works with pytest 9: every Ray test goes to one worker, with that worker's one local Ray
    (two Ray clusters on 2 cores would each starve the other), while the other worker runs the servers, subprocesses
    and kills. xdist 3.8 groups by a suffix it writes into `item._nodeid`, which pytest 9 no longer reads (its node
    ids live in `_id`), so `xdist_group` marks would silently form no group; this scheduler groups the test_ray* modules
    by their names. A module with a fixture that outlives a test (scope module or longer) is a group too: its tests
    share that fixture only on one worker."""
    if config.getvalue("dist") != "loadgroup": return None
    from xdist.scheduler import LoadGroupScheduling

    class RayGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid):
            if _is_ray_test(nodeid): return RAY_GROUP
            module = nodeid.split("::")[0]
            # a module whose fixtures outlive a test goes whole to one worker: split over two, each worker computed them
            # (measured: the hostile reports of test_report_pages, 49 s, twice; test_compare's runs and test_pages' audit)
            return module if _shares_fixtures(module) else super()._split_scope(nodeid)
    return RayGroupScheduling(config, log)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long case (kill-and-resume, fault injection, report runs); "
                                       "deselect locally with -m 'not slow' (CI runs everything)")
    config.addinivalue_line("markers", "budget(cpu, why): a test allowed more than the default CPU budget of "
                                       f"{BUDGET_CPU_S} s, with the reason (tests/README.md)")


BUDGET_CPU_S = 30   # CPU seconds a test may cost (setup, call and teardown; what it starts and waits for included)


def _cpu() -> float:
    import resource
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    "Each test's wall and CPU seconds go to $TEST_COST_DIR/tests-<worker>.jsonl (`make test` prints the costliest)."
    import time
    t0, c0 = time.perf_counter(), _cpu()
    yield
    d = os.environ.get("TEST_COST_DIR")
    if not d: return
    m = item.get_closest_marker("budget")
    rec = {"nodeid": item.nodeid, "wall": round(time.perf_counter() - t0, 1), "cpu": round(_cpu() - c0, 1),
           "budget": m.kwargs.get("cpu", BUDGET_CPU_S) if m else BUDGET_CPU_S}
    Path(d).mkdir(parents=True, exist_ok=True)
    with open(Path(d) / f"tests-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a") as f: f.write(json.dumps(rec) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    area = getattr(item.module, "AREA", None)
    if area is None: return
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        _REL.tests[area]["skipped" if rep.skipped else "passed" if rep.passed else "failed"] += 1


def _to_json(figures:dict)->dict:
    return {a: {k: {"__set__": sorted(v)} if isinstance(v, set) else v for k, v in f.items()} for a, f in figures.items()}


def pytest_sessionfinish(session, exitstatus):
    "An xdist worker hands its reliability figures to the controller (`-n 2`: each worker collects its own share)."
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["reliability"] = json.dumps({"figures": _to_json(_REL.figures), "tests": dict(_REL.tests)})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    "The controller merges a finished xdist worker's figures (numbers summed, sets unioned, as `Reliability.add` does)."
    data = getattr(node, "workeroutput", {}).get("reliability")
    if not data: return
    data = json.loads(data)
    for area, figs in data["figures"].items():
        for k, v in figs.items():
            _REL.add(area, **{k: set(v["__set__"]) if isinstance(v, dict) and "__set__" in v else v})
    for area, counts in data["tests"].items():
        for k, n in counts.items(): _REL.tests[area][k] += n


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    areas = [a for a in AREAS if a in _REL.tests or a in _REL.figures]
    if not areas: return
    terminalreporter.section("reliability summary")
    for a in areas: terminalreporter.write_line(_REL.line(a))


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray with 2 CPUs for the whole session (starting one takes 5-10 s here), stopped at its end. Every Ray
    test shares it. Pools are per test, and inside `warm_workers()` a pool's worker processes are kept for the next
    pool of the same shape (its model unloaded): a pool then starts in about 0.5 s instead of 4-7 s. A worker that was
    killed or restarted is never kept, so a test that kills one leaves nothing behind."""
    ray = pytest.importorskip("ray")
    from acrb_nb.ray_exec import ray_init, warm_workers
    ray_init(num_cpus=2)
    with warm_workers(): yield
    ray.shutdown()
