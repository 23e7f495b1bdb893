"""Scale-out benchmark: a CPU-bound tiny model (the `tiny-sd` diffusers pipeline: 32×32, 2 steps, one torch thread
per worker) on 1 vs 2 local Ray workers, and the Ray path vs the local runner on the same work.

Prints a table and ends with:  RESULT speedup_2w=<x> ray_overhead=<y> speedup_2node=<z>
  speedup_2w    = items/s with 2 Ray workers ÷ items/s with 1 Ray worker           (ideal 2.0 on 2 free cores)
  ray_overhead  = wall time on Ray with 1 worker ÷ wall time of local `run_items`
                  (1 worker thread, 1 torch thread) on the same items − 1            (0.05 = 5 % slower)
  speedup_2node = items/s on a two-node cluster ÷ items/s on its head alone: nodes started with `ray start` as
                  separate processes (tests/ray_cluster.py), one CPU and one worker each, the driver joining by
                  address (measured in a child process: a process joins one Ray; the second node is added after
                  the one-node rounds, so those rounds are not interleaved)
Every path loads and warms its model before timing (start-up = build + 8 warm-up items, printed apart). Ray gets 3
*logical* CPUs so that the 1-worker and 2-worker pools stay loaded side by side and the rounds can be interleaved
(local, 1 worker, 2 workers, repeated); only one path computes at a time, and the fastest round of each counts.
Images are checked identical across the three paths. On Ray the driver writes blobs and fsyncs the store while the
worker computes the next item; the local runner does both in its one thread — part of what `ray_overhead` shows.
"""
import os, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path
os.environ.setdefault("ACRB_PROGRESS", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from acrb_nb.store import ItemStore
from acrb_nb.runner import run_items
from acrb_nb.ray_exec import ray_init, RayWorkerPool, build_fn, generator_factory

N, BATCH, REPEATS, MODEL = int(os.environ.get("SCALE_N", 96)), 8, int(os.environ.get("SCALE_REPEATS", 3)), "tiny-sd"
ITEMS = [{"prompt": f"a photo of person number {i} at work", "seed": i} for i in range(N)]
WARM = [{"prompt": f"warm-up {i}", "seed": i} for i in range(8)]

def shas(st): return {e["key"]: e["record"]["image_sha256"] for e in st.entries()}

def two_node():
    "The --two-node child: best wall time of ITEMS on a one-node cluster, then on the same cluster with a second node."
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from ray_cluster import LocalCluster
    tmp, walls = Path(tempfile.mkdtemp(prefix="bench-2node-")), {}
    try: _two_node(tmp, walls, LocalCluster)
    finally: shutil.rmtree(tmp, ignore_errors=True)  # the stores of every round: nothing is left in the temp folder
    print(f"TWO_NODE wall_1node={min(walls[1]):.4f} wall_2node={min(walls[2]):.4f} "
          f"rounds_1node={' '.join(f'{t:.2f}' for t in walls[1])} rounds_2node={' '.join(f'{t:.2f}' for t in walls[2])}")

def _two_node(tmp, walls, LocalCluster):
    "`two_node`'s rounds, their stores under `tmp`."
    with LocalCluster(nodes=1) as c:
        os.environ.update({k: c.env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")})  # before Ray reads them
        ray_init(c.address)
        for n in (1, 2):
            if n == 2:
                c.add_node()
                c.wait_cpus(2)
            with RayWorkerPool(generator_factory(MODEL), num_actors=n, num_cpus=1, torch_threads=1) as pool:
                warm = [{"prompt": f"warm-up {i}", "seed": i} for i in range(8 * n)]
                pool.run(warm, ItemStore(tmp / f"warm-{n}" / "items.sqlite"), batch_size=4)
                for r in range(max(1, REPEATS - 1)):  # one round fewer than the local paths: the bench stays under 3 minutes
                    st = ItemStore(tmp / f"node{n}-{r}" / "items.sqlite")
                    t0 = time.perf_counter()
                    res = pool.run(ITEMS, st, batch_size=BATCH)
                    walls.setdefault(n, []).append(time.perf_counter() - t0)
                    assert res.rows.status.eq("done").all() and len(res.summary["nodes"]) == n, res.summary
        import ray
        ray.shutdown()  # leave before the cluster stops (a driver left connected waits a minute for its head)

def main():
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    try: _main(tmp)
    finally: shutil.rmtree(tmp, ignore_errors=True)  # the stores and images of every round

def _main(tmp):
    "The bench, its stores under `tmp`."
    factory = generator_factory(MODEL)
    startup, walls, work_s, stores = {}, {}, {}, {}
    torch.set_num_threads(1)  # the local path: one worker thread, one torch thread, like one Ray worker
    t0 = time.perf_counter()
    fn = build_fn(factory, ItemStore(tmp / "warm-local" / "items.sqlite")); [fn(it) for it in WARM]
    startup["local"] = time.perf_counter() - t0
    t0 = time.perf_counter(); ray_init(num_cpus=3); startup["ray_init"] = time.perf_counter() - t0
    pools = {}
    for n in (1, 2):
        t0 = time.perf_counter()
        pools[n] = RayWorkerPool(factory, num_actors=n, num_cpus=1, torch_threads=1); pools[n].start()
        warm = [{"prompt": f"warm-up {i}", "seed": i} for i in range(8 * n)]
        pools[n].run(warm, ItemStore(tmp / f"warm-{n}" / "items.sqlite"), batch_size=4)
        startup[f"ray_{n}w"] = time.perf_counter() - t0
    runs = {"local": lambda st: run_items(build_fn(lambda blobs: fn), ITEMS, st, max_workers=1),
            "ray_1w": lambda st: pools[1].run(ITEMS, st, batch_size=BATCH),
            "ray_2w": lambda st: pools[2].run(ITEMS, st, batch_size=BATCH)}
    try:
        for r in range(REPEATS):
            for k, run in runs.items():
                st = ItemStore(tmp / f"{k}-{r}" / "items.sqlite")
                t0 = time.perf_counter(); df = run(st).rows; dt = time.perf_counter() - t0
                assert df.status.eq("done").all(), df.status.value_counts()
                walls.setdefault(k, []).append(dt); work_s.setdefault(k, []).append(df.seconds.sum())
                stores[k] = st
    finally:
        for p in pools.values(): p.shutdown()
    assert shas(stores["local"]) == shas(stores["ray_1w"]) == shas(stores["ray_2w"]), "executors disagree on the images"
    best = {k: min(v) for k, v in walls.items()}
    print(f"model={MODEL} items={N} batch_size={BATCH} rounds={REPEATS} (fastest counts) cores={os.cpu_count()} "
          f"load_avg_1m={os.getloadavg()[0]:.1f} (shared machine: numbers are noisy)")
    print(f"{'path':<8} {'best s':>7} {'items/s':>8} {'ms/item':>8} {'all rounds s':>22} {'fn s/item':>10} {'start-up s':>11}")
    for k in runs:
        rounds = " ".join(f"{t:.2f}" for t in walls[k])
        fn_ms = min(work_s[k]) / N
        print(f"{k:<8} {best[k]:7.2f} {N / best[k]:8.1f} {1000 * best[k] / N:8.1f} {rounds:>22} {fn_ms:10.4f} {startup[k]:11.1f}")
    print(f"{'ray_init':<8} {'':7} {'':8} {'':8} {'':>22} {'':10} {startup['ray_init']:11.1f}")
    speedup = best["ray_1w"] / best["ray_2w"]
    overhead = best["ray_1w"] / best["local"] - 1
    import ray
    ray.shutdown()  # the local Ray's processes leave the cores to the cluster's
    p = subprocess.run([sys.executable, __file__, "--two-node"], capture_output=True, text=True, timeout=300)
    m = re.search(r"TWO_NODE wall_1node=(\S+) wall_2node=(\S+) (.*)", p.stdout)
    if p.returncode or not m: raise SystemExit(f"the two-node cluster run failed:\n{(p.stdout + p.stderr)[-3000:]}")
    w1, w2 = float(m[1]), float(m[2])
    print(f"two-node cluster (ray start, 1 CPU + 1 worker per node): 1 node {N / w1:.1f} items/s, 2 nodes {N / w2:.1f} "
          f"items/s ({m[3]})")
    print(f"RESULT speedup_2w={speedup:.3f} ray_overhead={overhead:.3f} speedup_2node={w1 / w2:.3f}")

if __name__ == "__main__":
    if "--two-node" in sys.argv:
        try: two_node()
        except BaseException:  # printed here: Ray's hook for uncaught errors would wait a minute for the stopped cluster
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
    else: main()
