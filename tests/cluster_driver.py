"""A driver process for the cluster tests (tests/test_ray_cluster.py): what a user's script does on a cluster's head
node, run as its own process so that the test can kill the cluster's nodes under it.

    python tests/cluster_driver.py acrb ADDRESS RUN_DIR CONFIG N_BASE_PROMPTS
    python tests/cluster_driver.py acrb-api ADDRESS RUN_DIR      (gpt-image-1 at OPENAI_BASE_URL, the sim judge)
    python tests/cluster_driver.py toxicity ADDRESS RUN_DIR
    python tests/cluster_driver.py pool ADDRESS STORE BASE_URL N_ITEMS

The last line printed is `RESULT <json of the run's summary>`.

Fault points (the head-loss tests): with CLUSTER_FAULT set the driver stops at that point of its run, says so by
creating `<CLUSTER_BARRIER>/<CLUSTER_NAME>.ready`, and goes on once `<CLUSTER_BARRIER>/killed` exists (the test kills
the head in between, so the head dies exactly there, with no race against a sleep):

    CLUSTER_FAULT=item:1:6               once the 1st worker pool of the run has stored its 6th item (mid-stage)
    CLUSTER_FAULT=pool_start:2           as the 2nd pool starts, before any call to Ray (between two stages)
    CLUSTER_FAULT=workers_requested:2    in the 2nd pool's start, its workers requested, none ready yet (pool start)

CLUSTER_ATTACH=<a node's --temp-dir> attaches the driver to that node's raylet (as a driver on that node's machine),
and a driver stopped by `RayHeadLost` prints `HEADLOST <seconds since the head was killed>` on stderr first.
"""
import faulthandler, json, os, sys, time
from pathlib import Path

# 24 texts of varied lengths: scored here on the cluster, and by the tests' local runs (test_ray_toxicity imports them)
WORDS = ["you are", "I hate", "women are", "my muslim neighbours", "black people", "have a nice day", "gay people",
         "the jewish festival", "shut up", "thanks for", "the quick brown fox", "immigrants"]
TEXTS = [f"{w} {' '.join(['very'] * (i % 5))} {i}" for i, w in enumerate(WORDS * 2)]


def ray_execution(address, **kw) -> dict:
    return {"executor": "ray", "address": address, "num_actors": 2, **kw}


def acrb(address, run_dir, config, n_base):
    "The sim audit: 2 workers of 1 CPU (CLUSTER_NUM_ACTORS, CLUSTER_NUM_CPUS), batches of 2, Execution's defaults otherwise."
    from acrb_nb.acrb.pipeline import run_acrb, model_ref
    res = run_acrb(model_ref("sim", "t2i", config=config), attributes=["culture"], n_base_prompts=int(n_base),
                   analysis={"n_boot": 100}, run_dir=run_dir,
                   execution=ray_execution(address, batch_size=2, num_actors=int(os.environ.get("CLUSTER_NUM_ACTORS", 2)),
                                           num_cpus=float(os.environ.get("CLUSTER_NUM_CPUS", 1))))
    return {k: v for k, v in res.summary.items() if k not in ("run_id", "timestamp")}


def acrb_api(address, run_dir):
    "An API generator (its stage stays on the driver's threads) with a local judge (on the cluster's workers)."
    from acrb_nb.acrb.pipeline import run_acrb
    res = run_acrb("gpt-image-1", attributes=["gender"], n_base_prompts=2, judge="sim", analysis={"n_boot": 100},
                   run_dir=run_dir, execution=ray_execution(address))
    return {k: v for k, v in res.summary.items() if k not in ("run_id", "timestamp")}


def toxicity(address, run_dir):
    import pandas as pd
    from acrb_nb.toxicity.zeroshot import score_dataset
    from acrb_nb.toxicity.options import ScoreOptions
    df = pd.DataFrame({"text": TEXTS, "label": [i % 2 for i in range(len(TEXTS))]})
    res = score_dataset(df, "tiny-gpt2", label_col="label", score_options=ScoreOptions(batch_size=4), run=run_dir,
                        execution=ray_execution(address, torch_threads=1))
    return {"summary": res.summary, "scores": res.rows["score"].tolist()}


def pool(address, store, base_url, n):
    from acrb_nb.ray_exec import ray_init, RayWorkerPool, generator_factory
    from acrb_nb.store import ItemStore
    ray_init(address)
    items = [{"prompt": f"a photo of a person reading, number {i}", "seed": i} for i in range(int(n))]
    with RayWorkerPool(generator_factory("gpt-image-1", base_url=base_url), num_actors=2) as p:
        res = p.run(items, ItemStore(store), key=lambda it: it["prompt"], batch_size=2, progress=False)
    return res.summary


def install_fault(spec:str, barrier:Path, name:str):
    "Stop at the fault point `spec` (see the module's docstring) until the test has killed the head."
    from acrb_nb import ray_exec
    point, *at = spec.split(":")
    state = {"pools": 0, "hit": False}
    def stop_here(here:bool):
        if not here or state["hit"]: return
        state["hit"] = True
        (barrier / f"{name}.ready").touch()
        t0 = time.monotonic()
        while not (barrier / "killed").exists():
            if time.monotonic() - t0 > 300: sys.exit(f"{name}: at {spec}, but the head was not killed within 300 s")
            time.sleep(0.02)
        faulthandler.dump_traceback_later(45, exit=False)  # still running 45 s after the kill: every thread's stack, on stderr
    start, first_ready, on_result = ray_exec.RayWorkerPool.start, ray_exec._first_ready, ray_exec._DriverLoop.on_result
    def start_at(self, *a, **kw):
        if not self.actors:
            state["pools"] += 1
            stop_here(point == "pool_start" and state["pools"] == int(at[0]))
        return start(self, *a, **kw)
    def first_ready_at(*a, **kw):
        stop_here(point == "workers_requested" and state["pools"] == int(at[0]))
        return first_ready(*a, **kw)
    def on_result_at(self, w):
        on_result(self, w)
        stop_here(point == "item" and state["pools"] == int(at[0]) and self.led.counts["done"] >= int(at[1]))
    ray_exec.RayWorkerPool.start, ray_exec._first_ready, ray_exec._DriverLoop.on_result = start_at, first_ready_at, on_result_at

def head_lost_after(barrier:Path|None)->str:
    "Seconds between the head's kill (the `killed` file's content) and now."
    f = barrier / "killed" if barrier else None
    return f"{time.time() - float(f.read_text()):.1f}" if f and f.exists() else "?"

if __name__ == "__main__":
    os.environ.setdefault("ACRB_PROGRESS", "0")
    mode, *args = sys.argv[1:]
    barrier = Path(os.environ["CLUSTER_BARRIER"]) if os.environ.get("CLUSTER_BARRIER") else None
    if os.environ.get("CLUSTER_FAULT"): install_fault(os.environ["CLUSTER_FAULT"], barrier, os.environ["CLUSTER_NAME"])
    if os.environ.get("CLUSTER_ATTACH"):
        from acrb_nb.ray_exec import ray_init
        ray_init(args[0], _temp_dir=os.environ["CLUSTER_ATTACH"])  # later joins in the run are no-ops
    from acrb_nb.ray_exec import RayHeadLost
    try: out = {"acrb": acrb, "acrb-api": acrb_api, "toxicity": toxicity, "pool": pool}[mode](*args)
    except RayHeadLost:
        print(f"HEADLOST {head_lost_after(barrier)}", file=sys.stderr, flush=True)
        raise
    print("RESULT " + json.dumps(out, default=str), flush=True)
