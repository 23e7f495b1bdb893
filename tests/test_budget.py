"""Provider budgets (issue 18, item 6): the execution path paces API calls by the adapter's declared budget or the
run's `budget`, as seen by a loopback OpenAI server's own log of arrival times."""
import os
from pathlib import Path

import pytest

from acrb_nb.adapters.base import IMAGE_GENERATORS, VISION_JUDGES
from acrb_nb.core import item_key
from acrb_nb.execution import AdapterRef, Budget, Execution, ModelSession, resolve_budget, run_model_items
from acrb_nb.store import ItemStore
from acrb_nb.testing import FakeOpenAI

pytestmark = pytest.mark.timeout(120)
os.environ.setdefault("OPENAI_API_KEY", "sk-acrbtest-" + "B7q2Zk4Pw9" * 3)  # provider-shaped, never a real key
os.environ.setdefault("ACRB_PROGRESS", "0")


def gen_work(model, blobs):
    "One text-to-image request per item."
    return lambda it: {**model.generate(it["prompt"], seed=it["seed"]).to_record(blobs), "prompt": it["prompt"]}


def key_of(info, it):
    return item_key("test.budget", model=info, prompt=it["prompt"])


def items(n, tag=""):
    return [{"prompt": f"a photo of a person reading {tag}{i}", "seed": i} for i in range(n)]


def arrivals(srv):
    return sorted(c["t"] for c in srv.calls("images"))


def max_in_window(ts, width):
    "The most arrivals inside any window of `width` seconds."
    return max(sum(1 for u in ts if t <= u < t + width) for t in ts)


def test_rpm_pacing_seen_by_the_server(tmp_path):
    with FakeOpenAI() as srv:
        gen = IMAGE_GENERATORS.create("gpt-image-1", base_url=srv.base_url)
        res = run_model_items(gen, gen_work, items(16), ItemStore(tmp_path / "items.sqlite"), key_of=key_of,
                              execution={"budget": {"rpm": 300, "burst": 0.2}})  # 5 requests a second, one at a time
        ts = arrivals(srv)
    assert res.summary["done"] == 16 and len(ts) == 16
    rate = (len(ts) - 1) / (ts[-1] - ts[0])
    assert 4.0 < rate <= 5.4, rate                    # the server saw 5 requests a second
    assert max_in_window(ts, 1.0) <= 6                # never a burst: at most 5 (+1 at a window's edge) in any second
    assert res.summary["budget"] == {"rpm": 300, "concurrency": 4, "rpm_from": "budget", "endpoint": "127.0.0.1"}


def test_concurrency_cap_seen_by_the_server(tmp_path):
    with FakeOpenAI(latency=0.4) as srv:  # each request is answered after 0.4 s
        gen = IMAGE_GENERATORS.create("gpt-image-1", base_url=srv.base_url)
        run_model_items(gen, gen_work, items(8), ItemStore(tmp_path / "items.sqlite"), key_of=key_of,
                        execution={"budget": {"concurrency": 2, "pace": False}})
        ts = arrivals(srv)
    assert len(ts) == 8
    assert max_in_window(ts, 0.3) <= 2                # two in flight: a third arrives only when one is answered
    assert ts[-1] - ts[0] >= 3 * 0.4 - 0.05           # 8 requests, 2 at a time, 0.4 s each: 4 rounds


def test_loopback_server_is_not_paced_by_the_provider_budget(tmp_path):
    with FakeOpenAI() as srv:
        gen = IMAGE_GENERATORS.create("gpt-image-1", base_url=srv.base_url)
        res = run_model_items(gen, gen_work, items(12), ItemStore(tmp_path / "items.sqlite"), key_of=key_of)
        ts = arrivals(srv)
    assert res.summary["budget"]["rpm"] is None and ts[-1] - ts[0] < 2.0   # the declared 5 rpm would take over a minute


def test_declared_budget_at_the_provider_endpoint():
    real = IMAGE_GENERATORS.create("gpt-image-1", base_url="https://api.openai.com/v1")  # no call is made
    lim, workers, how = resolve_budget(real)
    assert (lim.rpm, workers, how["rpm_from"]) == (5, 2, "declared")
    judge = VISION_JUDGES.create("gpt-4o-mini-judge")
    assert resolve_budget(judge)[0].rpm == 500
    per_model = {"gpt-image-1": {"rpm": 20}, "*": {"rpm": 50, "concurrency": 3}}
    assert resolve_budget(real, Execution(budget=per_model))[0].rpm == 20
    assert resolve_budget(judge, Execution(budget=per_model))[:2][1] == 3 and resolve_budget(judge, Execution(budget=per_model))[0].rpm == 50
    assert resolve_budget(real, Execution(budget="unlimited"))[0] is None


def test_session_by_name_paces_and_refuses_a_bad_budget(tmp_path):
    with FakeOpenAI() as srv:
        ref = AdapterRef.of("image_generator", "gpt-image-1", base_url=srv.base_url)
        with ModelSession(ref, gen_work, ItemStore(tmp_path / "items.sqlite"), {"budget": {"rpm": 600, "burst": 0.1}}) as s:
            res = s.run(items(6, "ref"), key=lambda it: key_of(s.info, it))
        ts = arrivals(srv)
    assert res.summary["budget"]["rpm"] == 600 and (len(ts) - 1) / (ts[-1] - ts[0]) <= 10.8
    with pytest.raises(ValueError, match="unknown budget settings"):
        ModelSession(ref, gen_work, ItemStore(tmp_path / "x.sqlite"), {"budget": {"rmp": 60}})
    assert Budget.of({"gpt-image-1": "unlimited"}, "gpt-image-1").pace is False
