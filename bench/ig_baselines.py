"""Which IG baseline means "no text" to the model? The measurement behind `explain_rows`' default baseline.

On calibration rows of the shipped ToxiGen sample (the split the toxicity report never evaluates on), SmolLM2-135M with
the seed framing (task "toxicity", chat template, no in-context examples): for every candidate baseline the gap
|f(x) − f(x′)| per row (`toxicity.explain.baseline_gaps`, forward passes only), and `gap_table`'s ranking (the
largest share of rows whose gap reaches 0.5 nats; ties: the larger median gap), the default chosen among the baselines
that remove the text (`NO_TEXT_BASELINES`; blur, a smoothed copy of the text, is measured for comparison). A row whose gap is smaller has almost
nothing to attribute, however well its integral converges. With `--ig-rows N` it also runs Integrated Gradients and the
deletion / insertion checks for every candidate on N rows (`toxicity.faithfulness.compare_baselines`; minutes per row).
With `--fillers`, more neutral filler tokens are measured as "filler" baselines beside them (`baseline_gaps(fillers=...)`):
whether another "no text" token would leave more to attribute than " .". `--framing report` measures under the framing
the toxicity report chooses for SmolLM2 on this sample (toxic/harmless labels, chat template, 4 in-context examples),
and `--split evaluation` on the held-out rows. The header line also gives the share of rows with |f(x)| ≥ 0.5: where
a text-free prompt scores near the undecided point (0), the gap is about the model's own confidence |f(x)|, which no
choice of "no text" baseline can raise.

The toxicity report makes the same choice itself (`ig_baseline="auto"`), on its own calibration rows and with the
framing it chose there; this benchmark is what `IGOptions.baseline`'s library default rests on.

Prints progress, the table, and ends with:
  RESULT chosen=<baseline> share_chosen=<x> share_mean=<x> share_filler=<x> share_pad=<x> share_zero=<x> share_uniform=<x> share_blur=<x>
  share_<b> = share of the rows whose |f(x) − f(x′)| ≥ 0.5 nats with baseline b

Usage: python bench/ig_baselines.py [--rows 24] [--ig-rows 0] [--baselines mean,zero,pad,filler,uniform,blur] [--model smollm2-135m]
                                   [--framing seed|report] [--split calibration|evaluation]
                                   [--fillers]   (adds filler:<name> rows for " ." (the default, as a check), " the", "\\n", " ", "_", "...", " -", " x", ",", " a")
"""
import argparse, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ACRB_PROGRESS", "0")
import numpy as np
import pandas as pd


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=24, help="calibration rows for the gaps (forward passes only)")
    ap.add_argument("--ig-rows", type=int, default=0, help="calibration rows for IG + deletion/insertion per baseline (slow)")
    ap.add_argument("--baselines", default="mean,zero,pad,filler,uniform,blur")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--fillers", action="store_true", help="also measure other neutral filler tokens (adds about a minute)")
    ap.add_argument("--framing", choices=["seed", "report"], default="seed",
                    help="seed: toxicity, chat template, no examples; report: the framing the toxicity report chooses for "
                         "SmolLM2 on the shipped sample (toxic/harmless, chat, 4 in-context examples drawn from the "
                         "calibration rows, which then leave them; long prompts: about 4.5 minutes with --fillers)")
    ap.add_argument("--split", choices=["calibration", "evaluation"], default="calibration",
                    help="the rows measured; evaluation: the held-out rows, to check a choice made on calibration rows")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    from acrb_nb.adapters.base import TEXT_LMS
    from acrb_nb.data import load_toxigen
    from acrb_nb.toxicity.calibration import calibration_split, pick_examples, with_examples, Framing, TOXIC_SAFE
    from acrb_nb.toxicity.explain import baseline_gaps, gap_table, NO_TEXT_BASELINES
    from acrb_nb.toxicity.faithfulness import compare_baselines
    lm = TEXT_LMS.create(a.model)
    tox = load_toxigen()
    mask = calibration_split(tox["label"].to_numpy(), 0.5, seed=0)
    cal, task, chat = tox[mask], "toxicity", None
    if a.framing == "report":
        ex = pick_examples(cal, 4, seed=0)  # as `select_framing` draws them
        cal, task, chat = cal.drop(index=list(ex.index)), with_examples(Framing(TOXIC_SAFE, True, 4), ex), True
    rows = cal if a.split == "calibration" else tox[~mask]
    bl = a.baselines.split(",")
    parts = []
    for i in range(0, a.rows, 4):  # in blocks, to print progress
        g = baseline_gaps(rows.iloc[i:min(i + 4, a.rows)], lm, task, baselines=bl, chat=chat,
                          fillers=FILLERS if a.fillers else None)
        parts.append(g.assign(row=g.row + i))
        print(f"  rows {min(i + 4, a.rows)}/{a.rows} [{time.perf_counter() - t0:.0f} s]", flush=True)
    gaps = pd.concat(parts, ignore_index=True)
    if a.fillers:
        if "filler" in bl:  # the same baseline computed both ways: filler:dot is the library's " ." filler
            same = gaps.pivot_table(index="row", columns="baseline", values="f_baseline")
            assert np.allclose(same["filler"], same["filler:dot"], atol=1e-4), same[["filler", "filler:dot"]]
    chosen = str(gap_table(gaps[gaps.baseline.isin(NO_TEXT_BASELINES)]).baseline.iloc[0])  # among "no text" baselines
    table = gap_table(gaps)
    fx = gaps.drop_duplicates("row").f_x
    print(f"gap |f(x) − f(baseline)| on {a.rows} {a.split} rows, {a.framing} framing (f(x): mean {fx.mean():.2f}, sd {fx.std():.2f}; "
          f"|f(x)| ≥ 0.5 on {(fx.abs() >= 0.5).mean():.0%})")
    print(table.round(3).to_string(index=False), flush=True)
    print(f"chosen among the baselines that remove the text {tuple(b for b in bl if b in NO_TEXT_BASELINES)}: {chosen}")
    if a.ig_rows:
        cb = compare_baselines(rows.iloc[:a.ig_rows], lm, bl, ig_options={"n_steps": a.steps}, n_boot=1000, task=task, chat=chat)
        print(f"IG on {a.ig_rows} {a.split} rows [{time.perf_counter() - t0:.0f} s]")
        print(cb.round(3).to_string(index=False))
    share = table.set_index("baseline")["share_gap_ge_0.5"]
    print(f"[{time.perf_counter() - t0:.0f} s]")
    print(f"RESULT chosen={chosen} share_chosen={share[chosen]:.3f} " + " ".join(f"share_{b}={share[b]:.3f}" for b in bl)
          + ("" if not a.fillers else f" share_best_filler={share[share.index.str.startswith('filler:')].max():.3f}"))


FILLERS = {"dot": " .", "the": " the", "newline": "\n", "space": " ", "underscore": "_", "ellipsis": "...", "dash": " -", "x": " x",
           "comma": ",", "a": " a"}


if __name__ == "__main__":
    main()
