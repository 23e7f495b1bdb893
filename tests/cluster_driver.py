"""A driver process for the cluster tests (tests/test_ray_cluster.py): what a user's script does on a cluster's head
node, run as its own process so that the test can kill the cluster's nodes under it.

    python tests/cluster_driver.py acrb ADDRESS RUN_DIR CONFIG N_BASE_PROMPTS [HEAD_TIMEOUT]
    python tests/cluster_driver.py acrb-api ADDRESS RUN_DIR      (gpt-image-1 at OPENAI_BASE_URL, the sim judge)
    python tests/cluster_driver.py toxicity ADDRESS RUN_DIR
    python tests/cluster_driver.py pool ADDRESS STORE BASE_URL N_ITEMS

The last line printed is `RESULT <json of the run's summary>`.
"""
import json, os, sys

# 24 texts of varied lengths: scored here on the cluster, and by the tests' local runs (test_ray_toxicity imports them)
WORDS = ["you are", "I hate", "women are", "my muslim neighbours", "black people", "have a nice day", "gay people",
         "the jewish festival", "shut up", "thanks for", "the quick brown fox", "immigrants"]
TEXTS = [f"{w} {' '.join(['very'] * (i % 5))} {i}" for i, w in enumerate(WORDS * 2)]


def ray_execution(address, **kw) -> dict:
    return {"executor": "ray", "address": address, "num_actors": 2, **kw}


def acrb(address, run_dir, config, n_base, head_timeout="30"):
    from acrb_nb.acrb.pipeline import run_acrb, model_ref
    res = run_acrb(model_ref("sim", "t2i", config=config), attributes=["culture"], n_base_prompts=int(n_base),
                   analysis={"n_boot": 100}, run_dir=run_dir,
                   execution=ray_execution(address, batch_size=2, head_timeout=float(head_timeout)))
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


if __name__ == "__main__":
    os.environ.setdefault("ACRB_PROGRESS", "0")
    mode, *args = sys.argv[1:]
    out = {"acrb": acrb, "acrb-api": acrb_api, "toxicity": toxicity, "pool": pool}[mode](*args)
    print("RESULT " + json.dumps(out, default=str), flush=True)
