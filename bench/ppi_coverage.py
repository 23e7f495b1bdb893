"""Coverage of the judge-corrected Δ_erasure interval (issue 19): prediction-powered inference (PPI++, `ppi_py`) with the
small-sample adjustments of `acrb_nb.validation`, and a selection-adjusted (GMS) interval for Δ = max − min.

Model (`validation.coverage_study` defaults): the six ACRB culture values with the simulator's planted erasure rates
(Korean, Chinese, Kenyan, Indian 0.15, Nigerian 0.25, American 0.10: Δ = 0.15), 300 judged images per value, a judge that
misses the cue (says "erased" although it is there) 20% of the time for Nigerian images, 10% for Kenyan, 5% for the
others, and sees a cue that is not there 5% of the time; 50 human labels per value (a stratified random sample, 300 in
all). Each replicate runs `corrected_rates` and `corrected_delta` as a report would.

Uncorrected: the judge-only interval the reports print (`stats.disparity`: GMS on the bootstrap covariance, 500
resamples), the BCa bootstrap interval of max − min they printed before, and the same GMS interval on the judge's
Wilson rates (all printed in the table).

Prints a table and ends with:  RESULT corrected_coverage=<x> uncorrected_coverage=<y>
Target: corrected_coverage within 0.92–0.98 over >= 200 replicates (default 1000; PPI_BENCH_REPS to change it).
Measured (1000 replicates, 68–81 s): corrected 0.985 — the lower limit misses 1.3% of the time, the upper 0.2% — and
uncorrected 0.259; per-group 0.962. It was 0.964 (per-group 0.949) while each value's λ was fitted on its own labels,
which made the lower limit miss 3.3% of the time; at 200 replicates (nbs/07_validation.ipynb) 0.980.
"""
import os, time

def main():
    import pandas as pd
    from acrb_nb.validation import coverage_study, coverage_summary
    reps = int(os.environ.get("PPI_BENCH_REPS", 1000))
    t0 = time.perf_counter()
    study = coverage_study(reps=reps, seed=0, n_boot=500)
    secs = time.perf_counter() - t0
    S = coverage_summary(study)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(S.round(4).to_string(index=False))
    print(f"per-group corrected rate coverage {study.rates_covered.mean():.4f}; {reps} replicates in {secs:.1f} s")
    corrected = float(S.coverage[S.interval.str.startswith("corrected")].iloc[0])
    uncorrected = float(S.coverage[S.interval.str.contains("report")].iloc[0])
    print(f"RESULT corrected_coverage={corrected:.4f} uncorrected_coverage={uncorrected:.4f}")

if __name__ == "__main__":
    main()
