"""Labels a labelling design needs for the same corrected Δ_erasure interval (issue 51): `uniform` (today's design and
estimator: a simple random sample per value, PPI++ on the judge's verdicts, each value's λ fitted on the other values'
labels) against `auto` (`validation.sample_items`
with design="auto": active sampling with the judge's probability as the prediction for a probability judge,
verdict-stratified Neyman for a verdict-only one; `stats.ppi.design_rates`, covariance clustered by prompt, a verdict
stratum whose labels are all alike borrowing the other values' variance there).

Model (`validation.simulate_design_audit`): the six ACRB culture values of data/sim/planted_acrb.yaml (Korean, Chinese,
Indian 0.15, Nigerian 0.25, Kenyan 0.22, American 0.10: Δ = 0.15; and all at 0.15 for Δ = 0), 100 base prompts × 3 images
per value (300 judged images, clustered by prompt). Two judges:
  - calibrated and sharp: the `judge_probability` of data/sim/planted_acrb_judge_calibrated.yaml (sharpness 0.7,
    calibration 1) — it states a probability per image;
  - flat-error: the `judge_error` of data/sim/planted_acrb_judge_error.yaml (misses Nigerian 20%, Kenyan 10%, others 5%,
    false cues 5%) with the sim judge's fixed confidence 90 — only its verdict says anything.
Each replicate draws a population, then a sample per design and budget, labels it with the truth and runs the
correction as a report would. `uniform` gets 40 labels per value (240); `auto` is run at several budgets and the
budget giving uniform's mean width is interpolated (width ∝ 1/√n between the two bracketing budgets):
labels_ratio = 240 / that budget. width_ratio_equal_n = auto's mean width / uniform's at 240 labels. Coverage at Δ = 0 is
measured for uniform and verdict-neyman at 240 labels and for auto at the grid budget at or above the matching one, on
the sharp judge, and for uniform and auto on the flat-error judge; each design's smaller coverage of Δ = 0.15 and Δ = 0
is printed, and RESULT's coverage_auto and coverage_uniform are the sharp judge's.

Nothing here is chosen on these configurations: the active floor (0.2), λ = 1 and the auto rule were chosen on
development configurations (rates 0.12/0.12/0.30/0.20/0.08/0.12, sharpness 0.6 and 0.7, other seeds) recorded in
nbs/07_validation.ipynb; the two repairs that made every design cover Δ = 0 (the uniform estimator's λ from the other
values, verdict strata borrowing the other values' variance) were diagnosed on these audits and chosen between
alternatives on `coverage_study`'s model and the development rates (`bench/delta_zero.py`). The planner
(`validation.plan_labels`) predicts auto's budget for uniform's width from the judge's probabilities of one population
(no truth); its prediction is compared with the interpolated budget.

Every design and budget runs all replicates at once (`validation.design_deltas`: the replicates stacked as one
population in which each has its own dimension, values and prompts, so each replicate's estimates and covariances are
the ones it would get alone — checked in nbs/07_validation.ipynb).

Ends with:  RESULT labels_ratio=… coverage_auto=… coverage_uniform=… width_ratio_equal_n=…
Targets: labels_ratio >= 2 (calibrated sharp judge) and >= 1.0 on the flat-error judge (printed); coverage >= 0.93 for
every design at Δ = 0.15 and Δ = 0; planner within 20%. 200 replicates (LABELS_BENCH_REPS to change it): 39–44 s of
CPU, 41–50 s of wall time on the shared two-core machine at a load of 0.5–4 (it was 2 min 43 s of CPU and 8 min of wall
time before the replicates were stacked; 600 replicates: 2 min 17 s of CPU). Measured: labels_ratio 2.94 (600
replicates: 2.89), flat-error judge 1.32 (1.25); coverage, the smaller of Δ = 0.15 and Δ = 0: uniform 0.980 (0.980)
on the sharp judge and 0.985 (0.978) on the flat-error one, verdict-neyman 0.965 (0.947), auto 0.980 (0.973) on the
sharp judge and 0.985 (0.980) on the flat-error one; planner +4% (+2%). Before the two repairs: uniform 0.925 (0.922)
at Δ = 0, and auto on the flat-error judge 0.918 at Δ = 0 (600 replicates, 156 labels), with labels_ratio_flat 1.67
(1.63) — its intervals were too narrow.
"""
import os, time

N_UNIFORM = 240
GRID = (0.3, 0.4, 0.5, 1.0)       # auto's budgets on the sharp judge, as shares of uniform's
FLAT_GRID = (0.5, 0.65, 0.85, 1.0)  # and on the flat-error judge


def _rates():
    from acrb_nb.adapters.planted import load_planted_acrb, sim_data_path
    cfg = load_planted_acrb(sim_data_path("planted_acrb.yaml"))
    return {a.id: a.rates["p_erase"] for a in cfg.attributes.values() if a.dimension == "culture"}


def _judges():
    from acrb_nb.adapters.planted import load_planted_acrb, sim_data_path
    cal = load_planted_acrb(sim_data_path("planted_acrb_judge_calibrated.yaml")).judge_probability
    err = load_planted_acrb(sim_data_path("planted_acrb_judge_error.yaml"))
    miss = {a.id: a.judge_error["miss"] for a in err.attributes.values() if a.dimension == "culture"}
    fc = next(a.judge_error["false_cue"] for a in err.attributes.values() if a.dimension == "culture")
    return ({"sharpness": cal["sharpness"], "calibration": cal["calibration"]},
            {"sharpness": None, "miss": miss, "false_cue": fc, "confidence": 0.9})


def _run(rates, judge, plan, reps):
    "Rows (rep, design, budget, labels, width, covers) of `plan` = [(design, budget), ...] on `reps` fresh populations."
    import numpy as np
    from acrb_nb.validation import simulate_design_audit, design_deltas
    true, rows = max(rates.values()) - min(rates.values()), []
    pops = [simulate_design_audit(rates, seed=10_000 + r, **judge) for r in range(reps)]
    for design, n in plan:                   # every replicate at once (`design_deltas`: one stacked population)
        o = design_deltas(pops, design, n, seed=0)
        rows += [{"rep": int(x.rep), "design": design, "chosen": x.design, "budget": n, "labels": int(x.labels),
                  "width": x.hi - x.lo,
                  "covers": bool(x.lo <= true + 1e-12 and true <= x.hi + 1e-12) if np.isfinite(x.hi) else False}
                 for x in o.itertuples()]
    return rows


def _matching_budget(tab, design, target):
    "The budget at which `design`'s mean width equals `target` (width ∝ 1/√n between the bracketing budgets)."
    import numpy as np
    t = tab[tab.design == design].sort_values("budget")
    b, w = t.budget.to_numpy(float), t.width.to_numpy(float)
    for i in range(len(b) - 1):
        if w[i] >= target >= w[i + 1]:
            x0, x1 = 1 / np.sqrt(b[i]), 1 / np.sqrt(b[i + 1])
            x = x0 + (target - w[i]) * (x1 - x0) / (w[i + 1] - w[i])
            return 1 / x ** 2
    return float("nan") if w[0] < target else float(b[-1])


def main():
    import numpy as np, pandas as pd
    from acrb_nb.validation import simulate_design_audit, plan_labels
    reps = int(os.environ.get("LABELS_BENCH_REPS", 200))
    t0, c0 = time.perf_counter(), time.process_time()
    rates, (sharp, flat) = _rates(), _judges()
    grid = [int(round(g * N_UNIFORM)) for g in GRID]
    rows = [dict(r, judge="sharp", delta="0.15") for r in _run(rates, sharp, [("uniform", N_UNIFORM), ("verdict-neyman", N_UNIFORM)]
                                                               + [("auto", n) for n in grid], reps)]
    tab = pd.DataFrame(rows).groupby(["design", "budget"], as_index=False)[["labels", "width", "covers"]].mean()
    w_u = float(tab.width[tab.design == "uniform"].iloc[0])
    n_auto = _matching_budget(tab, "auto", w_u)
    n_at = min(grid, key=lambda n: abs(n - n_auto) if n >= n_auto else 1e9)     # the grid budget at or above the match
    zero = {k: 0.15 for k in rates}
    rows += [dict(r, judge="sharp", delta="0") for r in _run(zero, sharp, [("uniform", N_UNIFORM), ("verdict-neyman", N_UNIFORM),
                                                                           ("auto", n_at)], reps)]
    frows = [dict(r, judge="flat", delta="0.15") for r in _run(rates, flat, [("uniform", N_UNIFORM)] +
                                                               [("auto", int(round(g * N_UNIFORM))) for g in FLAT_GRID], reps)]
    rows += frows
    ftab = pd.DataFrame(frows).groupby(["design", "budget"], as_index=False)[["labels", "width", "covers"]].mean()
    n_flat = _matching_budget(ftab, "auto", float(ftab.width[ftab.design == "uniform"].iloc[0]))
    fgrid = [int(round(g * N_UNIFORM)) for g in FLAT_GRID]
    nf_at = min(fgrid, key=lambda n: abs(n - n_flat) if n >= n_flat else 1e9)
    rows += [dict(r, judge="flat", delta="0") for r in _run(zero, flat, [("uniform", N_UNIFORM), ("auto", nf_at)], reps)]
    pop = simulate_design_audit(rates, seed=99_999, **sharp).drop(columns="truth")
    plan = plan_labels(pop, w_u, "auto", reps=20, seed=1)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    all_ = pd.DataFrame(rows)
    cov = all_.groupby(["judge", "delta", "design", "budget"], as_index=False).agg(reps=("rep", "size"), labels=("labels", "mean"),
                                                                                  width=("width", "mean"), coverage=("covers", "mean"))
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(cov.round(4).to_string(index=False))
    at = lambda j, d, des, n: float(cov.coverage[(cov.judge == j) & (cov.delta == d) & (cov.design == des) & (cov.budget == n)].iloc[0])
    cov_auto = min(at("sharp", "0.15", "auto", n_at), at("sharp", "0", "auto", n_at))
    cov_unif = min(at("sharp", "0.15", "uniform", N_UNIFORM), at("sharp", "0", "uniform", N_UNIFORM))
    cov_vn = min(at("sharp", "0.15", "verdict-neyman", N_UNIFORM), at("sharp", "0", "verdict-neyman", N_UNIFORM))
    w_auto_eq = float(tab.width[(tab.design == "auto") & (tab.budget == N_UNIFORM)].iloc[0])
    ratio, fratio = N_UNIFORM / n_auto, N_UNIFORM / n_flat
    print(f"sharp judge: uniform {N_UNIFORM} labels, mean width {w_u:.4f}; auto reaches it with {n_auto:.1f} labels "
          f"(coverage at {n_at}: Δ>0 {at('sharp', '0.15', 'auto', n_at):.3f}, Δ=0 {at('sharp', '0', 'auto', n_at):.3f}); "
          f"verdict-neyman coverage {cov_vn:.3f}")
    print(f"flat-error judge: auto (verdict-neyman) reaches uniform's width with {n_flat:.1f} labels: labels_ratio_flat={fratio:.3f}; "
          f"coverage {ftab.covers.min():.3f} (Δ = 0: uniform {at('flat', '0', 'uniform', N_UNIFORM):.3f}, "
          f"auto at {nf_at} {at('flat', '0', 'auto', nf_at):.3f})")
    both = lambda j, des, n: min(at(j, "0.15", des, n), at(j, "0", des, n))
    print(f"coverage of the planted Δ by design, the smaller of Δ = 0.15 and Δ = 0: uniform {cov_unif:.3f} (sharp judge), "
          f"{both('flat', 'uniform', N_UNIFORM):.3f} (flat-error); verdict-neyman {cov_vn:.3f}; auto {cov_auto:.3f} "
          f"(sharp: active), {both('flat', 'auto', nf_at):.3f} (flat-error: verdict-neyman)")
    print(f"planner: {plan['labels']} labels predicted for width {w_u:.4f}, bench {n_auto:.1f}: "
          f"planner_error={plan['labels'] / n_auto - 1:+.3f}")
    print(f"{reps} replicates in {secs:.1f} s of wall time, {cpu:.1f} s of CPU")
    print(f"RESULT labels_ratio={ratio:.3f} coverage_auto={cov_auto:.3f} coverage_uniform={cov_unif:.3f} "
          f"width_ratio_equal_n={w_auto_eq / w_u:.3f}")


if __name__ == "__main__":
    main()
