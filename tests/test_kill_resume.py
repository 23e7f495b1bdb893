"""Kill-and-resume and retry honesty of the store + runner, with the real OpenAI SDK against a local server
running in its own process (so killing the client leaves the server and its call log intact)."""
import json, os, signal, subprocess, sys, textwrap, time
from collections import Counter
from pathlib import Path
import numpy as np
import pytest
from acrb_nb.core import rng
from acrb_nb.store import ItemStore
from acrb_nb.testing import start_server_process, stop_server_process, FakeOpenAI, RateLimit, ServerError, Timeout

N = 200
CLIENT = textwrap.dedent("""
    import json, sys
    import openai
    from acrb_nb.store import ItemStore
    from acrb_nb.runner import run_items, RetryPolicy
    base_url, db, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0, timeout=1.0)
    def fn(item):
        r = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": item["prompt"]}])
        return {"outcome": "answered", "prompt": item["prompt"], "text": r.choices[0].message.content}
    items = [{"prompt": f"item {i:03d}"} for i in range(n)]
    df = run_items(fn, items, ItemStore(db), max_workers=8, progress=False,
                   retry=__import__("acrb_nb.runner").runner.RetryPolicy(max_attempts=8, base_delay=0.05, max_delay=0.5))
    print(json.dumps(df.summary), flush=True)
""")

# every prompt with a '7' gets one 429 (Retry-After 0.2 s), with a '3' one 500, with '55' one timeout
SCRIPT = {"rules": [
    {"contains": "7", "action": {"kind": "rate_limit", "retry_after": 0.2}, "times": 1, "per_prompt": True},
    {"contains": "3", "action": {"kind": "server_error", "status": 500}, "times": 1, "per_prompt": True},
    {"contains": "55", "action": {"kind": "timeout", "delay": 2.0}, "times": 1, "per_prompt": True}]}

def _read_log(path):
    p = Path(path)
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()] if p.exists() else []

def test_sigkill_midrun_then_resume_exactly_once(tmp_path):
    log = tmp_path / "calls.jsonl"
    proc, base_url = start_server_process("openai", SCRIPT, latency=0.03, log_path=log)
    try:
        db = tmp_path / "items.sqlite"
        gen = rng(2026, "test", "kill-points")
        kill_at = sorted(gen.integers(20, N - 20, size=3).tolist())      # seeded kill points (items done)
        finished_at_kill, log_len_at_kill = [], []
        for k in kill_at:
            c = subprocess.Popen([sys.executable, "-c", CLIENT, base_url, str(db), str(N)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            t0 = time.time()
            while time.time() - t0 < 60:
                if db.exists():
                    st = ItemStore(db); n_done = st.counts()["done"]; st.close()
                    if n_done >= k: break
                if c.poll() is not None: break
                time.sleep(0.005)
            assert c.poll() is None, f"client finished before the kill point {k}: {c.stderr.read()[-2000:]}"
            c.send_signal(signal.SIGKILL); c.wait()
            time.sleep(0.1)  # let requests already on the wire reach the server log
            st = ItemStore(db); finished_at_kill.append(set(st.keys("done"))); st.close()
            log_len_at_kill.append(len([c for c in _read_log(log) if c["path"].endswith("/chat/completions")]))
        # final uninterrupted run
        r = subprocess.run([sys.executable, "-c", CLIENT, base_url, str(db), str(N)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        summary = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        stop_server_process(proc)
    calls = [c for c in _read_log(log) if c["path"].endswith("/chat/completions")]
    st = ItemStore(db)
    entries = st.entries()
    # every item done exactly once, with its own answer
    assert len(entries) == N and all(e["status"] == "done" for e in entries)
    assert {e["outcome"] for e in entries} == {"answered"}          # transient errors never became refusals
    assert summary["cached"] == len(finished_at_kill[-1]) and summary["failed"] == 0
    # zero repeated calls for items finished before each kill
    assert sorted(e["record"]["prompt"] for e in entries) == [f"item {i:03d}" for i in range(N)]
    for done_keys, start in zip(finished_at_kill, log_len_at_kill):
        finished = {e["record"]["prompt"] for e in entries if e["key"] in done_keys}
        later = {c["prompt"] for c in calls[start:]}
        assert not (later & finished), f"finished items called again after a kill: {sorted(later & finished)[:5]}"
    # every prompt reached the server; retries show up in the log but items succeeded once
    # a request cut off mid-body by a SIGKILL reaches the server unparsable: logged without a prompt, answered
    # with an error, and not an item's call (its item was in flight and is sent again on resume)
    cut = [c for c in calls if c["prompt"] is None]
    assert all(c["action"] == "error" for c in cut) and len(cut) <= 8 * len(kill_at), cut
    per_prompt = Counter(c["prompt"] for c in calls if c["prompt"] is not None)
    assert len(per_prompt) == N
    ok_per_prompt = Counter(c["prompt"] for c in calls if c["action"] == "ok")
    # an item can be answered twice only if it was in flight at a kill (answered, but not yet stored)
    in_flight_max = 8 * len(kill_at)
    assert sum(v - 1 for v in ok_per_prompt.values()) <= in_flight_max
    assert st.counters()["retries"] > 0
    print(f"\nkill-resume: {N} items, kills at {kill_at} done, {len(calls)} calls, "
          f"{sum(v - 1 for v in ok_per_prompt.values())} re-answered in-flight items, 0 lost, 0 duplicated")

def test_transient_errors_retried_never_refusals_and_retry_after_honoured(tmp_path):
    import openai
    from acrb_nb.runner import run_items, RetryPolicy
    script = [RateLimit(retry_after=1.0), ServerError(500), ServerError(503), Timeout(1.5)]
    with FakeOpenAI(script=script) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="test-key", max_retries=0, timeout=0.5)
        def fn(item):
            r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": item["q"]}])
            return {"outcome": "answered", "text": r.choices[0].message.content}
        st = ItemStore(tmp_path / "s.sqlite")
        df = run_items(fn, [{"q": "only item"}], st, max_workers=1, progress=False,
                       retry=RetryPolicy(max_attempts=6, base_delay=0.01)).rows
        log = srv.calls()
    assert df.status.tolist() == ["done"] and df.outcome.tolist() == ["answered"]
    assert [c["action"] for c in log] == ["rate_limit", "server_error", "server_error", "timeout", "ok"]
    assert log[1]["t"] - log[0]["t"] >= 1.0, "retried before Retry-After elapsed"
    c = st.counters()
    assert c["retries"] == 4 and c.get("refused", 0) == 0 and c["calls"] == 5

def test_exhausted_transient_is_failure_then_retry_failed_only_reruns_it(tmp_path):
    import openai
    from acrb_nb.runner import run_items, RetryPolicy
    rules = {"rules": [{"contains": "bad", "action": {"kind": "server_error", "status": 503}}]}
    with FakeOpenAI(script=rules) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="test-key", max_retries=0, timeout=2)
        def fn(item):
            r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": item["q"]}])
            return {"outcome": "answered"}
        st = ItemStore(tmp_path / "s.sqlite")
        items = [{"q": f"good {i}"} for i in range(5)] + [{"q": "bad one"}]
        df = run_items(fn, items, st, max_workers=3, progress=False, retry=RetryPolicy(max_attempts=3, base_delay=0.01)).rows
        assert df.status.value_counts().to_dict() == {"done": 5, "failed": 1}
        bad = df[df.status == "failed"].iloc[0]
        assert bad.error_kind == "transient_exhausted" and bad.outcome == "failed" and "503" in bad.error
        n = len(srv.log)
        df2 = run_items(fn, items, st, progress=False).rows                  # plain re-run: no call at all
        assert len(srv.log) == n and df2.cached.all()
        srv.reset({"rules": []})                                             # the server recovered
        df3 = run_items(fn, items, st, progress=False, retry_failed=True)
        assert len(srv.log) == 1 and srv.log[0]["prompt"] == "bad one"
        assert st.counts()["done"] == 6
