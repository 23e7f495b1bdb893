"""Fault injection: ACRB Stage II through the real OpenAI and Gemini SDKs against the local servers, with a seeded
per-prompt plan of faults — 429 with and without Retry-After, 500, 503, timeouts, dropped connections, malformed JSON —
before each item's final answer (an image, a policy refusal or a filtered output).

Promises checked, per API (≥ 500 calls each):
- no transient fault is ever counted as a refusal, and every item ends with the outcome its final answer implies;
- every policy refusal and filtered output is classified as the provider's structured fields say
  (OpenAI: a 400 `moderation_blocked` → `refused_policy` — OpenAI reports output moderation with the same code, so
  a filtered image is also `refused_policy`; Gemini: `promptFeedback.blockReason` → `refused_policy`,
  `finishReason: IMAGE_SAFETY` → `refused_safety_filter`);
- the run's manifest counters (calls, API requests, retries, refusals, images, outcomes) equal the server's own log;
- a retry after a 429 with Retry-After never comes sooner than the server asked.
"""
import json, threading
from collections import Counter

import pytest

from acrb_nb.core import RunSpec, rng, sha256_hex
from acrb_nb.store import Run
from acrb_nb.runner import RetryPolicy
from acrb_nb.testing import (FakeOpenAI, FakeGemini, Script, Ok, RateLimit, ServerError, Timeout, Drop, Malformed,
                             PolicyRefusal, Filtered)
from reliability_helpers import DUMMY_ENV, scene_image

AREA = "faults"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

RETRY_AFTER = 0.4
TRANSIENT = [RateLimit(), RateLimit(retry_after=RETRY_AFTER), ServerError(500), ServerError(503), Timeout(delay=1.0),
             Drop(), Malformed()]
FINAL = [(Ok(), 0.7), (PolicyRefusal(), 0.15), (Filtered(), 0.15)]
EXPECTED = {"openai": {"ok": "generated", "policy_refusal": "refused_policy", "filtered": "refused_policy"},
            "gemini": {"ok": "generated", "policy_refusal": "refused_policy", "filtered": "refused_safety_filter"}}


def plan(api, prompt):
    "The seeded list of actions one prompt meets: 0-3 transient faults, then its final answer."
    g = rng(2026, "faults", api, sha256_hex(prompt))
    n = int(g.choice([0, 1, 2, 3], p=[0.45, 0.3, 0.15, 0.1]))
    acts = [TRANSIENT[int(i)] for i in g.integers(0, len(TRANSIENT), n)]
    final = FINAL[int(g.choice(len(FINAL), p=[p for _, p in FINAL]))][0]
    return acts + [final]


class PlanScript(Script):
    "A server script that plays each prompt's plan in order (thread-safe), then answers Ok."
    def __init__(self, api):
        self.api, self.seen, self.lock = api, Counter(), threading.Lock()
        super().__init__(fn=self._next)

    def _next(self, req):
        p = req.get("prompt") or ""
        with self.lock:
            i = self.seen[p]; self.seen[p] += 1
        acts = plan(self.api, p)
        return acts[i] if i < len(acts) else Ok()


def _items(n_items):
    "ACRB T2I work items (all attributes) from the first base prompts: each has its own prompt text."
    from acrb_nb.acrb.prompts import stage1_prompts, load_attributes
    from acrb_nb.acrb.generate import t2i_items
    s1 = stage1_prompts("v1", load_attributes("v1"), seed=0).rows
    ids = sorted(s1.base_id.unique())
    items = []
    for b in ids:
        items += t2i_items(s1[s1.base_id == b], 1, seed=0)
        if len(items) >= n_items: break
    return items[:n_items]


@pytest.mark.parametrize("api", ["openai", "gemini"])
def test_fault_mix(api, run_tmp, reliability, monkeypatch):
    from acrb_nb.acrb.generate import generate, stage2_records
    from acrb_nb.adapters.images import OpenAIImages, GeminiImages
    for k, v in DUMMY_ENV.items(): monkeypatch.setenv(k, v)
    items = _items(400)
    prompts = [it["text"] for it in items]
    assert len(set(prompts)) == len(prompts)
    plans = {p: plan(api, p) for p in prompts}
    Srv = FakeOpenAI if api == "openai" else FakeGemini
    with Srv(PlanScript(api), image_size=(64, 64), image_fn=scene_image) as srv:
        model = (OpenAIImages("gpt-image-1", base_url=srv.base_url, timeout=0.3) if api == "openai"
                 else GeminiImages(base_url=srv.base_url, timeout=0.3))
        run = Run(RunSpec("reliability-faults", model.name, {"api": api, "n": len(items)}, 0), run_dir=run_tmp / api)
        df = generate(run, model, items,
                      execution={"max_workers": 8, "retry": RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05)}).rows
        log = srv.calls()
        s2 = stage2_records(run, items, model.describe())
        run.close()
    man = json.loads((run.dir / "manifest.json").read_text())

    # what the server saw
    acts = Counter(r["action"] for r in log)
    n_transient = sum(v for k, v in acts.items() if k not in ("ok", "policy_refusal", "filtered"))
    assert len(log) >= 500, f"only {len(log)} calls: raise the number of items"
    assert set(acts) >= {"ok", "rate_limit", "server_error", "timeout", "drop", "malformed", "policy_refusal", "filtered"}
    assert sum(len(p) for p in plans.values()) == len(log), "every planned action was played exactly once"

    # outcomes: each item ends as its final answer says; transient faults never become refusals
    assert (df.status == "done").all(), df[df.status != "done"].error.head().tolist()
    want = [EXPECTED[api][plans[p][-1].kind] for p in s2.text]
    wrong = [(t, w, o) for t, w, o in zip(s2.text, want, s2.outcome) if w != o]
    assert not wrong, f"{len(wrong)} items misclassified, e.g. {wrong[:3]}"
    refusals = [p for p in prompts if plans[p][-1].kind != "ok"]
    transient_as_refusal = sum(1 for p, o in zip(s2.text, s2.outcome) if plans[p][-1].kind == "ok" and o != "generated")
    assert transient_as_refusal == 0
    raw_ok = all(r.get("code") for r in s2[s2.outcome.str.startswith("refused")].to_dict("records"))
    assert raw_ok, "refusals must keep the provider's code"

    # the manifest's counters equal the server's log
    c, by_outcome = man["counters"], man["counts"]["by_outcome"]
    expect = {"calls": len(log), "api_requests": len(log), "retries": n_transient,
              "refused": acts["policy_refusal"] + acts["filtered"], "images": acts["ok"]}
    got = {k: c.get(k, 0) for k in expect}
    mismatches = {k: (got[k], v) for k, v in expect.items() if got[k] != v}
    assert not mismatches, f"manifest vs server log (manifest, log): {mismatches}"
    want_by = Counter(EXPECTED[api][plans[p][-1].kind] for p in prompts)
    assert by_outcome == dict(want_by), (by_outcome, want_by)

    # Retry-After: the next call for the same prompt comes no sooner than asked
    by_prompt = {}
    for r in log: by_prompt.setdefault(r["prompt"], []).append(r)
    gaps = [nxt["t"] - r["t"] for rs in by_prompt.values() for r, nxt in zip(rs, rs[1:])
            if r["action"] == "rate_limit" and plans[r["prompt"]][rs.index(r)].retry_after]
    assert gaps and min(gaps) >= RETRY_AFTER - 0.01, f"retried {RETRY_AFTER - min(gaps):.3f}s before Retry-After elapsed"

    reliability.add(AREA, calls=len(log), calls_by_api={api: len(log)}, transient=n_transient,
                    transient_as_refusal=transient_as_refusal, refusals=len(refusals),
                    refusals_ok=sum(1 for p, o in zip(s2.text, s2.outcome) if plans[p][-1].kind != "ok"
                                    and o == EXPECTED[api][plans[p][-1].kind]),
                    log_mismatches=len(mismatches), retry_after=len(gaps),
                    retry_after_ok=sum(g >= RETRY_AFTER - 0.01 for g in gaps))


@pytest.mark.parametrize("api,model", [("openai", "gpt-4o-mini"), ("gemini", "gemini-2.5-flash")])
def test_fault_mix_chat_scoring(api, model, run_tmp, reliability, monkeypatch):
    """The chat APIs, through zero-shot toxicity scoring of the ToxiGen-200 sample (first-token log-probs): policy
    refusals (OpenAI `message.refusal`, Gemini `blockReason`) and filtered outputs (`finish_reason: content_filter`,
    `finishReason: SAFETY`) are refused rows; transient faults are retried and never refusals."""
    from acrb_nb.adapters.base import TEXT_LMS
    from acrb_nb.toxicity import zeroshot
    from reliability_helpers import ROOT, label_logprobs
    for k, v in DUMMY_ENV.items(): monkeypatch.setenv(k, v)
    texts = list(dict.fromkeys(r["text"] for r in json.loads((ROOT / "data" / "toxicity" / "toxigen_200.json").read_text())))
    task = zeroshot.get_task("toxicity")
    prompt_of = {t: "\n".join(m["content"] for m in task.messages(t)) for t in texts}
    tag = f"{api}-chat"
    plans = {prompt_of[t]: plan(tag, prompt_of[t]) for t in texts}
    Srv = FakeOpenAI if api == "openai" else FakeGemini
    with Srv(PlanScript(tag), logprob_fn=label_logprobs) as srv:
        lm = TEXT_LMS.create(model, base_url=srv.base_url, timeout=0.3)
        run = Run(RunSpec("reliability-faults-chat", model, {"api": api, "n": len(texts)}, 0), run_dir=run_tmp / api)
        # a quick retry policy (the default waits 0.5 s, 1 s, 2 s, ...); 8 rows in flight as a user's run would have
        zs = zeroshot.score_dataset(texts, lm, run=run, score_options={"batch_size": 1, "contextual": False},
                                    execution={"progress": False, "max_workers": 8,
                                               "retry": RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05)})
        res = zs.rows
        log = srv.calls()
        run.close()
    man = json.loads((run.dir / "manifest.json").read_text())
    acts = Counter(r["action"] for r in log)
    n_transient = sum(v for k, v in acts.items() if k not in ("ok", "policy_refusal", "filtered"))
    assert set(acts) >= {"ok", "rate_limit", "server_error", "timeout", "drop", "malformed", "policy_refusal", "filtered"}
    assert sum(len(p) for p in plans.values()) == len(log)
    assert zs.summary.get("failed_batches", 0) == 0
    final = [plans[prompt_of[t]][-1].kind for t in texts]
    refused = res.refusal.notna().tolist()
    wrong = [(t, k) for t, k, r in zip(texts, final, refused) if (k != "ok") != r]
    assert not wrong, f"{len(wrong)} rows misclassified, e.g. {wrong[:3]}"
    assert res.scored.tolist() == [k == "ok" for k in final]
    transient_as_refusal = sum(1 for k, r in zip(final, refused) if k == "ok" and r)
    # manifest vs server log: one work item per row (batch_size=1), so the runner's calls are HTTP calls
    c = man["counters"]
    expect = {"calls": len(log), "api_requests": len(log), "retries": n_transient}
    mismatches = {k: (c.get(k, 0), v) for k, v in expect.items() if c.get(k, 0) != v}
    n_ref = acts["policy_refusal"] + acts["filtered"]
    if man["counts"]["by_outcome"].get("refused", 0) != n_ref: mismatches["refused rows"] = (man["counts"]["by_outcome"].get("refused", 0), n_ref)
    assert not mismatches, f"manifest vs server log (manifest, log): {mismatches}"
    by_prompt = {}
    for r in log: by_prompt.setdefault(r["prompt"], []).append(r)
    gaps = [nxt["t"] - r["t"] for rs in by_prompt.values() for i, (r, nxt) in enumerate(zip(rs, rs[1:]))
            if r["action"] == "rate_limit" and plans[r["prompt"]][i].retry_after]
    assert gaps and min(gaps) >= RETRY_AFTER - 0.01
    reliability.add(AREA, calls=len(log), calls_by_api={tag: len(log)}, transient=n_transient,
                    transient_as_refusal=transient_as_refusal, refusals=sum(k != "ok" for k in final),
                    refusals_ok=sum(1 for k, r in zip(final, refused) if k != "ok" and r), log_mismatches=len(mismatches),
                    retry_after=len(gaps), retry_after_ok=sum(g >= RETRY_AFTER - 0.01 for g in gaps))
