"""How `acrb_nb.validation`'s interval choices were made (issue 19; moved here from 07_validation's slow pass to keep
`nbdev_test` under 5 minutes, issue 15): the judged-audit model of `coverage_study` (six culture values, differential
judge misses `DIFFERENTIAL_MISS`, 5% false cues, 300 judged images per value), 200 replicates per cell, over other
configurations of the truth (*planted*: the simulator's culture erasure rates; *spread*: 0.10 … 0.35 in steps of 0.05;
*one high*: five groups at 0.15 and one at 0.30; *no disparity*: all 0.15, Δ = 0) and label counts (30, 50, 100 per
value). Rows: the per-group PPI interval with and without the small-sample adjustments (`pseudo=0,
small_sample=False`), and Δ = max − min by the percentile bootstrap and by GMS with κ = 0.5, 1, 2.

Asserts what 07_validation's lesson relies on: the adjusted per-group interval covers ≥ 0.93 in every cell.
Prints the grid and ends with:
  RESULT min_group_coverage=<x> gms1_planted=<y> gms1_no_disparity=<z>
"""
import time

import numpy as np
import pandas as pd


def grid_cell(rates, n_labels, reps=200, seed=11):
    from acrb_nb import stats
    from acrb_nb.validation import DIFFERENTIAL_MISS, simulate_judged_audit
    from acrb_nb.stats.ppi import corrected_rates
    true, out = max(rates.values()) - min(rates.values()), {}
    variants = {"adjusted": ({}, {"bootstrap": ("bootstrap", 1.0), "GMS κ=0.5": ("gms", 0.5), "GMS κ=1": ("gms", 1.0),
                                  "GMS κ=2": ("gms", 2.0)}),
                "unadjusted": ({"pseudo": 0, "small_sample": False}, {"GMS κ=1": ("gms", 1.0)})}
    for r in range(reps):
        d = simulate_judged_audit(rates, DIFFERENTIAL_MISS, 0.05, 300, n_labels, seed=seed * 7919 + r)
        for label, (kw, methods) in variants.items():
            R = corrected_rates(d, "group", dimension="dimension", min_labels=2, **kw)
            out.setdefault(f"{label}: per-group rates", []).append(
                np.mean([(lo <= rates[g] <= hi) for g, lo, hi in zip(R.group, R.corrected_lo, R.corrected_hi)]))
            for m, (meth, k) in methods.items():
                D = stats.delta_interval(R.corrected, R.corrected_se, method=meth, kappa=k, n_draws=1000, seed=r)
                out.setdefault(f"{label}: Δ {m}", []).append(D["lo"] <= true <= D["hi"])
    return {k: float(np.mean(v)) for k, v in out.items()}


def main():
    from acrb_nb.validation import PLANTED_CULTURE_ERASURE as P
    cells = {"planted, 50 labels": (P, 50), "planted, 30 labels": (P, 30), "planted, 100 labels": (P, 100),
             "spread, 50 labels": (dict(zip(P, [0.10, 0.15, 0.20, 0.25, 0.30, 0.35])), 50),
             "one high, 50 labels": (dict(zip(P, [0.15] * 5 + [0.30])), 50),
             "no disparity, 50 labels": (dict(zip(P, [0.15] * 6)), 50)}
    t0, cols = time.time(), {}
    for name, (r, n) in cells.items():
        cols[name] = grid_cell(r, n)
        print(f"  {name}: done [{time.time() - t0:.0f} s]", flush=True)
    grid = pd.DataFrame(cols)
    with pd.option_context("display.width", 220, "display.max_columns", 10):
        print(grid.round(3).to_string())
    print(f"grid in {time.time() - t0:.0f} s")
    assert grid.loc["adjusted: per-group rates"].min() >= 0.93, grid.loc["adjusted: per-group rates"]
    print(f"RESULT min_group_coverage={grid.loc['adjusted: per-group rates'].min():.3f} "
          f"gms1_planted={grid.loc['adjusted: Δ GMS κ=1', 'planted, 50 labels']:.3f} "
          f"gms1_no_disparity={grid.loc['adjusted: Δ GMS κ=1', 'no disparity, 50 labels']:.3f}")


if __name__ == "__main__":
    main()
