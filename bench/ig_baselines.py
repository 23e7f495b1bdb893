"""Which IG baseline means "no text"? The measurement behind `explain_rows`' default baseline.

On calibration rows of the shipped ToxiGen sample (the split the toxicity report never evaluates on), SmolLM2-135M
with the seed framing: for every candidate baseline, the gap |f(x) − f(x′)| on `--gap-rows` rows (forward passes
only), then on `--rows` rows Integrated Gradients with refinement and the deletion / insertion AOPC differences
(`toxicity.faithfulness.compare_baselines`). Prints both tables.

Usage: python bench/ig_baselines.py [--gap-rows 40] [--rows 6] [--baselines mean,zero,pad,...] [--model smollm2-135m]
"""
import argparse, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ACRB_PROGRESS", "0")
import numpy as np, pandas as pd
import torch


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gap-rows", type=int, default=40)
    ap.add_argument("--rows", type=int, default=6)
    ap.add_argument("--baselines", default="mean,zero,pad,filler,uniform,blur,expected")
    ap.add_argument("--ig-baselines", default=None, help="baselines for the IG part (default: --baselines)")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--model", default="smollm2-135m")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    from acrb_nb.adapters.base import TEXT_LMS
    from acrb_nb.adapters.text import context_length
    from acrb_nb.data import load_toxigen
    from acrb_nb.toxicity.zeroshot import PromptEncoder
    from acrb_nb.toxicity.calibration import calibration_split
    from acrb_nb.toxicity.explain import LabelMargin, baseline_inputs
    from acrb_nb.toxicity.faithfulness import compare_baselines
    lm = TEXT_LMS.create(a.model)
    tox = load_toxigen()
    cal = tox[calibration_split(tox["label"].to_numpy(), 0.5, seed=0)]
    bl = a.baselines.split(",")
    enc = PromptEncoder(lm.tokenizer, "toxicity", context=context_length(lm.model))
    recs = []
    for i, row in enumerate(enc.encode(cal["text"].tolist()[:a.gap_rows])):
        fn = LabelMargin(lm.model, row)
        with torch.no_grad():
            fx = float(fn(fn.ids)[0])
            for b in bl:
                fb = float(np.mean([float(fn(torch.tensor([x]))[0]) for x in baseline_inputs(fn, lm.tokenizer, b, seed=0)]))
                recs.append({"row": i, "baseline": b, "f_x": fx, "f_b": fb})
    d = pd.DataFrame(recs); d["gap"] = (d.f_x - d.f_b).abs()
    g = d.groupby("baseline", sort=False).agg(gap_ge_05=("gap", lambda x: (x >= 0.5).mean()), median_gap=("gap", "median"),
                                              mean_f_b=("f_b", "mean"), sd_f_b=("f_b", "std"))
    print(f"gap |f(x) - f(baseline)| on {a.gap_rows} calibration rows (f(x): mean {d.drop_duplicates('row').f_x.mean():.2f}, "
          f"sd {d.drop_duplicates('row').f_x.std():.2f}) [{time.perf_counter() - t0:.0f} s]")
    print(g.round(3).to_string(), flush=True)
    if a.rows:
        cb = compare_baselines(cal.iloc[:a.rows], lm, (a.ig_baselines or a.baselines).split(","), n_steps=a.steps, n_boot=1000)
        print(f"IG on {a.rows} calibration rows [{time.perf_counter() - t0:.0f} s]")
        print(cb.round(3).to_string())


if __name__ == "__main__":
    main()
