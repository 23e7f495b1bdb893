"""Scale-out benchmark: a CPU-bound tiny model (the `tiny-sd` diffusers pipeline: 32×32, 2 steps, one torch thread
per worker) on 1 vs 2 local Ray workers, and the Ray path vs the local runner on the same work.

Prints a table and ends with:  RESULT speedup_2w=<x> ray_overhead=<y>
  speedup_2w   = items/s with 2 Ray workers ÷ items/s with 1 Ray worker           (ideal 2.0 on 2 free cores)
  ray_overhead = wall time on Ray with 1 worker ÷ wall time of local `run_items`
                 (1 worker thread, 1 torch thread) on the same items − 1            (0.05 = 5 % slower)
Every path loads and warms its model before timing (start-up = build + 8 warm-up items, printed apart). Ray gets 3
*logical* CPUs so that the 1-worker and 2-worker pools stay loaded side by side and the rounds can be interleaved
(local, 1 worker, 2 workers, repeated); only one path computes at a time, and the fastest round of each counts.
Images are checked identical across the three paths. On Ray the driver writes blobs and fsyncs the store while the
worker computes the next item; the local runner does both in its one thread — part of what `ray_overhead` shows.
"""
import os, sys, tempfile, time
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

def main():
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
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
    print(f"RESULT speedup_2w={speedup:.3f} ray_overhead={overhead:.3f}")

if __name__ == "__main__":
    main()
