"""Coverage of the reported Δ = max − min interval at Δ = 0 and Δ > 0 (issue 18.3), on audits drawn from the shipped
planted config (`acrb.simulate.planted_long`, `data/sim/planted_acrb.yaml`).

Each replicate draws one refusal outcome per base prompt × attribute value from the planted probabilities (domain
multipliers included) and runs `acrb.metrics.disparities` exactly as the ACRB report does: Δ̂, the bootstrap
bias-corrected Δ, and the selection-adjusted interval (`stats.delta_interval`: GMS with κ = 1 on the cluster-bootstrap
covariance of the rates, lower limit 0 unless the within-prompt permutation test rejects at 0.05), 500 resamples and
500 shuffles per Δ. The four disability values are planted equal (Δ_refusal = 0); culture, gender, religion, age and
the pooled set are not (Δ > 0). The BCa bootstrap interval of max − min (what the report printed before) is shown
beside it.

Prints a table per (outcome, dimension) and ends with:
  RESULT coverage_null=<x> coverage_positive=<y> coverage_positive_min=<z> bca_coverage_null=<w> bias_null=<b> bias_bc_null=<c>
Targets: coverage_null >= 0.93, coverage_positive within 0.93-0.99, every dimension >= 0.90; 200 replicates by default
(DELTA_BENCH_REPS), all 108 prompts (DELTA_BENCH_PROMPTS=18 for the report's default size), about 1.5 minutes on 2 cores.
"""
import os, time

def main():
    import pandas as pd
    from acrb_nb.acrb.simulate import delta_coverage, coverage_table
    reps = int(os.environ.get("DELTA_BENCH_REPS", 200))
    n = os.environ.get("DELTA_BENCH_PROMPTS")
    t0 = time.perf_counter()
    study = delta_coverage(reps=reps, n_prompts=int(n) if n else None, outcomes=("refused",), seed=0)
    secs = time.perf_counter() - t0
    T = coverage_table(study)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(T.round(4).to_string(index=False))
    null, pos = study[study.true_delta == 0], study[study.true_delta > 0]
    per_dim = T[T.true_delta > 0].coverage.min()
    print(f"{reps} replicates of {n or 108} prompts in {secs:.1f} s; Δ = 0 rows: {len(null)}, Δ > 0 rows: {len(pos)}")
    print(f"RESULT coverage_null={null.covers.mean():.4f} coverage_positive={pos.covers.mean():.4f} "
          f"coverage_positive_min={per_dim:.4f} bca_coverage_null={null.boot_covers.mean():.4f} "
          f"bias_null={(null.delta - null.true_delta).mean():.4f} bias_bc_null={(null.delta_bc - null.true_delta).mean():.4f}")

if __name__ == "__main__":
    main()
