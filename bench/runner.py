"""Runner benchmark: throughput of run_items against a local OpenAI-compatible server with 200 ms latency per call,
16 workers, the real openai SDK; and the cost of re-running a finished run (it must make no call).

Prints a table and ends with:  RESULT throughput_frac=<x> rerun_frac=<y>
  throughput_frac = measured items/s ÷ ideal (16 workers / 0.2 s = 80 items/s)   target ≥ 0.9
  rerun_frac      = time to re-run the finished 200-item run ÷ time of the first run   target < 0.05
"""
import json, os, shutil, sys, tempfile, time
from pathlib import Path
os.environ.setdefault("ACRB_PROGRESS", "0")
import openai
from acrb_nb.store import ItemStore
from acrb_nb.runner import run_items
from acrb_nb.testing import start_server_process, stop_server_process

N, WORKERS, LATENCY = 200, 16, 0.2

def main():
    tmp = Path(tempfile.mkdtemp(prefix="bench-runner-"))
    log = tmp / "calls.jsonl"
    proc, base_url = start_server_process("openai", latency=LATENCY, log_path=log)  # own process: no GIL sharing
    try:
        client = openai.OpenAI(base_url=base_url, api_key="bench-key", max_retries=0, timeout=30)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "warm-up"}])
        def fn(item):
            r = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": item["q"]}])
            return {"outcome": "answered", "text": r.choices[0].message.content}
        items = [{"q": f"benchmark question {i}"} for i in range(N)]
        st = ItemStore(tmp / "items.sqlite")
        t0 = time.perf_counter(); df1 = run_items(fn, items, st, max_workers=WORKERS).rows; t1 = time.perf_counter() - t0
        calls_first = sum(1 for _ in log.read_text().splitlines())
        t0 = time.perf_counter(); df2 = run_items(fn, items, st, max_workers=WORKERS).rows; t2 = time.perf_counter() - t0
        calls_second = sum(1 for _ in log.read_text().splitlines()) - calls_first
    finally:
        stop_server_process(proc)
        shutil.rmtree(tmp, ignore_errors=True)  # the store and the server's call log: nothing left in the temp folder
    ideal = WORKERS / LATENCY
    thr = N / t1
    assert df1.status.eq("done").all(), df1.status.value_counts()
    assert df2.cached.all() and calls_second == 0, f"re-run made {calls_second} calls"
    print(f"items={N} workers={WORKERS} latency={LATENCY}s ideal={ideal:.0f} items/s")
    print(f"first run : {t1:7.3f} s  {thr:6.1f} items/s  ({calls_first - 1} calls)")
    print(f"re-run    : {t2:7.3f} s  ({calls_second} calls)")
    print(f"RESULT throughput_frac={thr / ideal:.3f} rerun_frac={t2 / t1:.4f}")

if __name__ == "__main__":
    main()
