"""Level and power of the paired model comparison (issue 32), against comparing two independent intervals.

Each replicate audits two models on the same 72 base prompts × 4 attribute values of one dimension (288 items a
model), with the simulator's dependence between models (`data/sim/compare_a.yaml`): an item's outcome is
Φ(ρ·z_item + √(1−ρ²)·z_model) < p(model, value), ρ = 0.6, so a prompt one model refuses is more often refused by the
other — the latent draws of two models correlate ρ² = 0.36, as the shipped configs' do.

- **level**: both models have the same rates (0.10, 0.20, 0.25, 0.30). Per replicate, the comparison runs exactly
  as the report does (`compare.compare_rates`: McNemar per value, Holm over the 4 values), and a false rejection is
  any adjusted p ≤ 0.05 — the family-wise error. The paired Δ test (`compare.delta_difference`, permutation over base
  prompts) is counted beside it (`level_delta`).
- **power**: model B refuses one value more often (0.25 → 0.40). Paired: that value's McNemar, Holm-adjusted over the
  4 values, ≤ 0.05. Independent: the two models' own 95 % Wilson intervals of that value do not overlap, the way a
  reader compares two per-model reports (`stats.binom_ci`).

Ends with: RESULT level=<x> level_delta=<y> power_paired=<p> power_independent=<q> replicates=<n>
Targets: level ≤ 0.06, power_paired > power_independent; 400 replicates (COMPARE_BENCH_REPS), about a minute on 2 cores.
"""
import os, time


def main():
    import numpy as np
    import pandas as pd
    from scipy import special
    from acrb_nb.compare import compare_rates, delta_difference
    from acrb_nb.stats import binom_ci
    reps = int(os.environ.get("COMPARE_BENCH_REPS", 400))
    n_prompts, rho, alpha = 72, 0.6, 0.05
    values = ["v:a", "v:b", "v:c", "v:d"]
    null_rates = np.array([0.10, 0.20, 0.25, 0.30])
    alt_rates = null_rates.copy(); alt_rates[2] = 0.40
    items = pd.DataFrame([{"cluster": f"BP{c}", "attribute_type": "v", "attribute_id": v, "item": f"BP{c}.{v}#0"}
                          for c in range(n_prompts) for v in values])
    col = items.attribute_id.map({v: i for i, v in enumerate(values)}).to_numpy()
    g = np.random.default_rng(20261126)
    t0 = time.perf_counter()
    fp, fp_delta, hit_paired, hit_indep = 0, 0, 0, 0
    for r in range(reps):
        z = g.standard_normal(len(items))
        lat = lambda: special.ndtr(rho * z + np.sqrt(1 - rho ** 2) * g.standard_normal(len(items)))
        ua, ub = lat(), lat()
        A = items.assign(refused=(ua < null_rates[col]).astype(float))
        B0 = items.assign(refused=(ub < null_rates[col]).astype(float))
        null = compare_rates({"A": A, "B": B0}, "refused", alpha=alpha)
        fp += bool((null.p_adj <= alpha).any())
        fp_delta += delta_difference(A, B0, "refused", n_boot=50, n_perm=200, seed=r)["p"] <= alpha
        B1 = items.assign(refused=(ub < alt_rates[col]).astype(float))
        alt = compare_rates({"A": A, "B": B1}, "refused", alpha=alpha).set_index("attribute_id")
        hit_paired += alt.loc["v:c", "p_adj"] <= alpha
        ka, kb = A.refused[col == 2].sum(), B1.refused[col == 2].sum()
        (la, ha), (lb, hb) = binom_ci(int(ka), n_prompts), binom_ci(int(kb), n_prompts)
        hit_indep += (hb < la) or (ha < lb)
    secs = time.perf_counter() - t0
    level, level_d, pp, pi = fp / reps, fp_delta / reps, hit_paired / reps, hit_indep / reps
    se = lambda p: np.sqrt(p * (1 - p) / reps)
    print(f"{reps} replicates, {n_prompts} base prompts x {len(values)} values, rho={rho}, {secs:.1f} s")
    print(f"null   (equal rates {null_rates.tolist()}): family-wise false rejections {level:.3f} ± {se(level):.3f} "
          f"(McNemar + Holm), Δ-difference test {level_d:.3f} ± {se(level_d):.3f}")
    print(f"effect (0.25 -> 0.40 on one value): paired McNemar + Holm {pp:.3f} ± {se(pp):.3f}; "
          f"non-overlapping independent Wilson intervals {pi:.3f} ± {se(pi):.3f}")
    print(f"RESULT level={level:.3f} level_delta={level_d:.3f} power_paired={pp:.3f} power_independent={pi:.3f} replicates={reps}")


if __name__ == "__main__":
    main()
