"""Why two designs' corrected Δ under-covered at Δ = 0, and what fixed each (issue 51): decompositions on
`bench/labels.py`'s planted audits, and the choice between the candidate fixes on configurations its RESULT does not use.

Part 1 — the uniform design (PPI++ per value, `corrected_rates`): `bench/labels.py`'s sharp-judge audits (the six culture
values of data/sim/planted_acrb.yaml, Δ = 0.15, and all at 0.15, Δ = 0; 100 prompts × 3 images per value; the calibrated
judge of sharpness 0.7; 40 labels per value; the bench's populations, seeds 10 000 + r, and samples), 600 replicates.
Each row swaps one piece of the corrected Δ and reports its coverage, how often the Wald test of equal rates (which keeps
0 in Δ's interval unless it rejects) rejects, the per-value coverage of ±1.96·se around the planted rate, the errors'
spread against the mean se, and the correlation between a value's |error| and its se:
  - PPI++ with λ̂ fitted on each value's own labels (`corrected_rates(lam=None)`: the estimator before the fix);
  - the same estimates with an oracle se (the Monte Carlo sd of each value's errors): is the Δ interval itself right?
  - Welch's heteroscedastic F test (statsmodels `anova_generic`) instead of the Wald test: is it the test's small sample?
  - no pseudo-items; λ = 1 (plain PPI); λ from the other values' labels (`corrected_rates()`, the fix);
  - the Horvitz–Thompson design estimator of the weighted designs (`design_rates`, λ = 1), clustered by prompt and
    not, and with its own λ̂.
Part 2 — verdict-neyman on a verdict-only judge (`design_rates` in verdict strata): the flat-error judge of
data/sim/planted_acrb_judge_error.yaml (confidence 90), `auto` (which draws verdict-neyman for it), 600 replicates, at
Δ = 0 with 26 labels per value (the budget `bench/labels.py` found) and on development rates (0.12, 0.12, 0.30, 0.20,
0.08, 0.12 and all 0.12; seeds 50 000 + r) with 20 and 40 labels per value. Rows: no repair (before), an oracle se,
half an Agresti–Min pseudo-item per cell of each verdict stratum's (y, f) table, and the variance a stratum whose
residuals are all alike borrows from the same cell of the other values (`design_rates(borrow=True)`, the fix); the share
of "kept"-verdict strata whose labels show no error is printed beside.
Part 3 — the choice for the uniform design (λ from the other values, or the HT estimator with λ = 1), made on
`coverage_study`'s judged-audit model (`simulate_judged_audit`: 300 images per value, a differential judge), which
`bench/labels.py`'s RESULT does not use: 200 replicates per cell over the configurations of `bench/ppi_design_grid.py`
and four more (all values equal with 30 labels, a judge erring 2% of the time, rare outcomes).

Ends with:  RESULT uniform_delta0_before=… uniform_delta0_after=… neyman_delta0_before=… neyman_delta0_after=…
            cross_min_delta=… cross_min_group=… ht_min_group=…
(Δ = 0 coverage before and after, the uniform design in Part 1 and verdict-neyman at the bench's budget in Part 2; the
smallest Δ and per-value coverage of the uniform fix over Part 3's cells; the smallest per-value coverage of the HT
alternative there). DELTA_ZERO_REPS sets Parts 1–2's replicates (600), DELTA_ZERO_GRID_REPS Part 3's (200).
"""
import os, sys, time

OWN, CROSS = "PPI++, λ̂ on the value's own labels (before)", "PPI++, λ from the other values' labels (after)"
NO_REPAIR, BORROW = "verdict strata, no repair (before)", "verdict strata, borrowed variance (after)"


def _bench_audits(null:bool, reps:int):
    "Part 1's stacked populations with the bench's uniform sample labelled (replicate r: groups and dimension 'r:…')."
    import numpy as np, pandas as pd
    from labels import _rates
    from acrb_nb.validation import simulate_design_audit, sample_items
    rates = {k: 0.15 for k in _rates()} if null else _rates()
    pops = [simulate_design_audit(rates, seed=10_000 + r, sharpness=0.7, calibration=1.0) for r in range(reps)]
    big = pd.concat([p.assign(rep=r) for r, p in enumerate(pops)], ignore_index=True)
    tag = big.rep.astype(str) + ":"
    big = big.assign(key=tag + big.key, group=tag + big.group, cluster=tag + big.cluster, dimension=tag + big.dimension)
    s = sample_items(big, 40 * len(rates) * reps, strata=["group"], seed=0, design="uniform", positive=(1,))
    big["judge"], big["human"] = big.verdict.astype(float), np.where(big.key.isin(set(s.items.key)), big.truth, np.nan)
    big["pi"], big["stratum"] = 40 / 300, big.group
    return rates, big


def _row(name, T, rates, p_null="wald", oracle=False)->dict:
    "Coverage of Δ, the equal-rates test's rejections and the per-value picture of one variant's rate table `T`."
    import numpy as np, pandas as pd
    from statsmodels.stats.oneway import anova_generic
    from acrb_nb.stats.rates import delta_interval, homogeneity_test
    true = max(rates.values()) - min(rates.values())
    T = T.assign(rep=T.group.str.split(":").str[0].astype(int), g0=T.group.str.split(":", n=1).str[1])
    err = T.corrected - T.g0.map(rates)
    if oracle: T = T.assign(corrected_se=T.g0.map(err.groupby(T.g0).std()))
    cov, wid, rej = [], [], []
    for r, g in T.groupby("rep"):
        t = g.corrected.to_numpy()
        V = (np.array([[(c or {}).get(h, 0.0) for h in g.group] for c in g.corrected_cov]) if "corrected_cov" in g and not oracle
             else np.diag(g.corrected_se.to_numpy() ** 2))
        p = p_null
        if p_null == "welch":
            n = g.n_labels.to_numpy(float)
            p = float(anova_generic(t, np.diag(V) * n, n, use_var="unequal", welch_correction=True).pvalue)
        D = delta_interval(t, None, n_draws=1000, seed=r, cov=V, p_null=p)
        cov.append(bool(D["lo"] <= true + 1e-12 and true <= D["hi"] + 1e-12))
        wid.append(D["hi"] - D["lo"])
        rej.append((homogeneity_test(t, V)["p"] if p == "wald" else p) <= 0.05)
    se = T.corrected_se.to_numpy(float)
    return {"Δ": true, "variant": name, "Δ coverage": np.mean(cov), "equal-rates test rejects": np.mean(rej),
            "per-value coverage ±1.96se": float(np.mean(np.abs(err) <= 1.96 * se)), "sd of errors": float(err.std()),
            "mean se": float(np.nanmean(se)), "corr(|err|, se)": float(pd.Series(np.abs(err.to_numpy())).corr(pd.Series(se))),
            "Δ width": float(np.nanmean(wid))}


def part1(reps:int):
    from acrb_nb.stats.ppi import corrected_rates, design_rates
    rows = []
    for null in (True, False):
        rates, big = _bench_audits(null, reps)
        kw = dict(dimension="dimension", min_labels=2)
        own = corrected_rates(big, "group", lam=None, **kw)
        rows += [_row(OWN, own, rates),
                 _row("  same estimates, oracle se", own, rates, oracle=True),
                 _row("  same, Welch's F test instead of Wald", own, rates, p_null="welch"),
                 _row("  own λ̂, no pseudo-items", corrected_rates(big, "group", lam=None, pseudo=0, **kw), rates),
                 _row("PPI, λ = 1", corrected_rates(big, "group", lam=1.0, **kw), rates),
                 _row(CROSS, corrected_rates(big, "group", **kw), rates),
                 _row("HT design estimator, λ = 1, clustered by prompt", design_rates(big, "group", cluster="cluster", **kw), rates),
                 _row("HT design estimator, λ = 1, no clusters", design_rates(big, "group", **kw).drop(columns="corrected_cov"), rates),
                 _row("HT design estimator, own λ̂, clustered", design_rates(big, "group", cluster="cluster", lam=None, **kw), rates)]
    return rows


def _agresti(y, f, stratum, lam, pooled, pseudo=0.5)->float:
    "The alternative to borrowing: half a pseudo-item per cell of every verdict stratum's (y, f) table, as a variance top-up."
    import numpy as np
    from acrb_nb.stats import ppi
    out, lab = 0.0, ~np.isnan(y)
    for h, v in ppi._cells(f, stratum).items():
        m = stratum == h
        r = y[m & lab] - lam * f[m & lab]
        if len(r) < 2: continue
        rr = np.r_[r, np.repeat([0.0, 1.0], len(v)) - lam * np.tile(v, 2)]
        w = np.r_[np.ones(len(r)), np.full(2 * len(v), pseudo)]
        s2 = np.sum(w * (rr - np.average(rr, weights=w)) ** 2) / (w.sum() - 1)
        out += (m.sum() / len(y)) ** 2 * max(0.0, s2 - np.var(r, ddof=1)) / len(r)
    return out


def part2(reps:int):
    "verdict-neyman on the flat-error judge: no repair, oracle se, Agresti–Min pseudo-items, borrowed variance."
    import contextlib
    import numpy as np, pandas as pd
    from labels import _rates, _judges
    from acrb_nb.stats import ppi
    from acrb_nb.validation import simulate_design_audit, sample_items, design_correction
    @contextlib.contextmanager
    def patched(fn):
        keep = ppi._borrowed_var
        ppi._borrowed_var = fn or keep
        try: yield
        finally: ppi._borrowed_var = keep
    base, flat = _rates(), _judges()[1]
    dev = dict(zip(base, [0.12, 0.12, 0.30, 0.20, 0.08, 0.12]))
    configs = {"bench, Δ = 0, 26 a value": ({k: 0.15 for k in base}, 26, 10_000),
               "dev, Δ = 0, 20 a value": ({k: 0.12 for k in base}, 20, 50_000),
               "dev, Δ = 0, 40 a value": ({k: 0.12 for k in base}, 40, 50_000),
               "dev, Δ = 0.22, 20 a value": (dev, 20, 50_000)}
    rows = []
    for name, (rates, n, s0) in configs.items():
        pops = [simulate_design_audit(rates, seed=s0 + r, **flat) for r in range(reps)]
        big = pd.concat([p.assign(rep=r) for r, p in enumerate(pops)], ignore_index=True)
        tag = big.rep.astype(str) + ":"
        big = big.assign(key=tag + big.key, group=tag + big.group, cluster=tag + big.cluster, dimension=tag + big.dimension)
        smp = sample_items(big, n * len(rates) * reps, strata=["group"], seed=0, design="auto", positive=(1,))
        assert smp.design["design"] == "verdict-neyman", smp.design["design"]
        rec = {"design": smp.design, "items": smp.items[["key", "stratum", "pi"]]}
        lab = pd.DataFrame({"key": smp.items.key, "label": smp.items.truth.astype(int).astype(str)})
        it = smp.items[smp.items.stratum.str.endswith("verdict=0")]
        quiet = float((it.truth != it.verdict).groupby(it.stratum).sum().eq(0).mean())
        corr = lambda: design_correction(big, rec, lab, "group", (1,), dimension="dimension", cluster="cluster", min_labels=2,
                                         effective=False)
        with patched(lambda *a: 0.0): before = corr()
        with patched(_agresti): agresti = corr()
        after = corr()
        for v, T, kw in ((NO_REPAIR, before, {}), ("  same estimates, oracle se", before, {"oracle": True}),
                         ("  Agresti–Min: ½ pseudo-item per (y, f) cell", agresti, {}), (BORROW, after, {})):
            rows.append({"config": name, "kept strata without an error": quiet, **_row(v, T, rates, **kw)})
        print(f"  {name}: done", file=sys.stderr, flush=True)
    return rows


def part3(reps:int):
    import numpy as np, pandas as pd
    from acrb_nb.validation import simulate_judged_audit, DIFFERENTIAL_MISS, PLANTED_CULTURE_ERASURE as P
    from acrb_nb.stats.ppi import corrected_rates, design_rates, corrected_delta
    eq = dict(zip(P, [0.15] * 6))
    cells = {"planted, 50": (P, 50), "planted, 30": (P, 30), "planted, 100": (P, 100),
             "spread, 50": (dict(zip(P, [0.10, 0.15, 0.20, 0.25, 0.30, 0.35])), 50),
             "one high, 50": (dict(zip(P, [0.15] * 5 + [0.30])), 50), "no disparity, 50": (eq, 50), "no disparity, 30": (eq, 30),
             "judge errs 2%, planted, 30": (P, 30, 0.02), "judge errs 2%, no disparity, 30": (eq, 30, 0.02),
             "rare 0.05, no disparity, 30": (dict(zip(P, [0.05] * 6)), 30, 0.05),
             "rare 0.03–0.08, judge errs 2%, 30": (dict(zip(P, [0.03, 0.04, 0.05, 0.06, 0.07, 0.08])), 30, 0.02)}
    rows = []
    for name, (rates, n, *e) in cells.items():
        miss, hall = (e[0], e[0]) if e else (DIFFERENTIAL_MISS, 0.05)
        true = max(rates.values()) - min(rates.values())
        big = pd.concat([(lambda d: d.assign(group=f"{r}:" + d.group, dimension=f"{r}:" + d.dimension))(
            simulate_judged_audit(rates, miss, hall, 300, n, seed=11 * 7919 + r)) for r in range(reps)], ignore_index=True)
        big["pi"], big["stratum"] = n / 300, big.group
        kw = dict(dimension="dimension", min_labels=2)
        for est, R in (("PPI++ own λ̂ (before)", corrected_rates(big, "group", lam=None, **kw)),
                       ("PPI++ λ from the others (after)", corrected_rates(big, "group", **kw)),
                       ("HT design estimator, λ = 1", design_rates(big, "group", **kw))):
            tr = R.group.str.split(":", n=1).str[1].map(rates)
            D = corrected_delta(R, n_draws=1000, seed=0, pooled=False)
            rows.append({"cell": name, "estimator": est,
                         "per-value coverage": float(((R.corrected_lo <= tr) & (tr <= R.corrected_hi))[R.cite == "corrected"].mean()),
                         "Δ coverage": float(((D.corrected_lo <= true + 1e-12) & (true <= D.corrected_hi + 1e-12)).mean()),
                         "Δ width": float((D.corrected_hi - D.corrected_lo).mean())})
        print(f"  {name}: done", file=sys.stderr, flush=True)
    return rows


def main():
    import pandas as pd
    t0 = time.perf_counter()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    reps = int(os.environ.get("DELTA_ZERO_REPS", 600))
    A, N = pd.DataFrame(part1(reps)), pd.DataFrame(part2(reps))
    B = pd.DataFrame(part3(int(os.environ.get("DELTA_ZERO_GRID_REPS", 200))))
    with pd.option_context("display.width", 250, "display.max_colwidth", 60, "display.max_rows", 200):
        print("Part 1: the uniform design on bench/labels.py's sharp-judge audits (40 labels a value)")
        print(A.round(3).to_string(index=False))
        print("\nPart 2: verdict-neyman (auto) on the flat-error judge")
        print(N.drop(columns="Δ").round(3).to_string(index=False))
        print("\nPart 3: the uniform design's candidates on coverage_study's judged-audit model")
        print(B.round(3).to_string(index=False))
    at = lambda d, v: float(A[(A["Δ"] == d) & (A.variant == v)]["Δ coverage"].iloc[0])
    ny = lambda v: float(N[(N.config == "bench, Δ = 0, 26 a value") & (N.variant == v)]["Δ coverage"].iloc[0])
    cross, ht = B[B.estimator.str.startswith("PPI++ λ")], B[B.estimator.str.startswith("HT")]
    print(f"{time.perf_counter() - t0:.0f} s")
    print(f"RESULT uniform_delta0_before={at(0.0, OWN):.3f} uniform_delta0_after={at(0.0, CROSS):.3f} "
          f"neyman_delta0_before={ny(NO_REPAIR):.3f} neyman_delta0_after={ny(BORROW):.3f} "
          f"cross_min_delta={cross['Δ coverage'].min():.3f} cross_min_group={cross['per-value coverage'].min():.3f} "
          f"ht_min_group={ht['per-value coverage'].min():.3f}")


if __name__ == "__main__":
    main()
