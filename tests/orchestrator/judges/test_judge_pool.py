"""A judge served by its own engine pool (real Ray and vLLM, the tiny model as the judge): answers and
choices through the client a reward function gets, a deadline that passes, a judge engine killed in the
middle of a call that loses no answer, and judges refused before any engine starts."""

import math
import threading
import time

import pytest
import ray

from orchestrator.builtin.tiny_reward_model import short_preferring_reward_model
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError
from orchestrator.judges import pools
from orchestrator.judges.client import Judge
from orchestrator.judges.router import JudgeTimeoutError

pytestmark = pytest.mark.engines


def _config(**judge) -> TrainConfig:
    # Four prompts at a time on its engine: a call of hundreds of prompts lasts long enough to be cut.
    pool = {"engines": 1, "num_cpus_per_engine": 0, "max_inflight_samples": 4}
    # A call's deadline (judges.quality.timeout_s) covers a replacement engine's start when one is killed
    # mid-call: about a minute on two idle cores, several on a loaded one.
    settings = {"model": "builtin:search", "max_tokens": 4, "timeout_s": 600, "pool": pool, **judge}
    return TrainConfig(max_completion_length=32, judges={"quality": settings})


@pytest.fixture(scope="module")
def judges(ray_session):
    config = _config()
    started = pools.JudgePools.start(config, ray_session, pools.check(config, longest_prompt=20))
    yield started
    started.shutdown()


def test_a_reward_functions_client_gets_answers_and_choices(judges):
    judge = judges.clients()["quality"]
    questions = ["Where is the apple?", "Q: what is a harbor? A:"]

    async def ask():
        return await judge.generate(questions), await judge.generate(questions), await judge.choices(questions, [" yes", " no"])

    first, again, odds = Judge.wait(ask())
    assert [a.token_ids for a in first] == [a.token_ids for a in again]  # greedy by default
    assert all(1 <= len(a.token_ids) <= 4 and len(a.logprobs) == len(a.token_ids) for a in first)
    for choice_logprobs in odds:  # renormalised over the two choices
        assert set(choice_logprobs) == {" yes", " no"}
        assert math.fsum(math.exp(v) for v in choice_logprobs.values()) == pytest.approx(1.0, abs=1e-5)
    figures = judges.metrics()
    assert figures["judges/quality/calls"] == 3 and figures["judges/quality/prompts"] == 6
    assert figures["judges/quality/completion_tokens"] == 2 * sum(len(a.token_ids) for a in first) + 2
    assert figures["judges/quality/latency_s"] > 0 and figures["judges/quality/engines"] == 1


def test_a_call_past_its_deadline_raises_in_the_reward_function(judges):
    hurried = Judge("quality", judges.servers["quality"], timeout_s=0.001)
    with pytest.raises(
        JudgeTimeoutError, match=r"judge 'quality' did not answer 1 prompt\(s\) within judges.quality.timeout_s=0.001s"
    ):
        Judge.wait(hurried.generate(["Where is the apple?"]))


def test_a_judge_engine_killed_mid_call_is_replaced_and_no_answer_is_lost(judges):
    judge = judges.clients()["quality"]
    prompts = [f"Q: where is the apple number {i}? A:" for i in range(256)]
    answers, began = [], time.monotonic()
    call = threading.Thread(target=lambda: answers.extend(Judge.wait(judge.generate(prompts, max_tokens=32, temperature=1.0))))
    call.start()
    time.sleep(0.5)  # the call is on the engine (it takes several seconds on 2 cores)
    ray.kill(ray.get_actor("judge-quality-engine-0"))  # the judge's engines are named after it
    killed_at = time.monotonic() - began
    call.join(timeout=600)
    print(f"killed {killed_at:.1f}s into a call that took {time.monotonic() - began:.1f}s")
    assert len(answers) == 256 and all(answer.token_ids for answer in answers)
    after = Judge.wait(judge.generate(prompts[:4]))  # served by the replacement
    assert len(after) == 4 and judges.metrics()["judges/quality/engine_restarts"] == 1


def test_judges_that_cannot_serve_are_refused_naming_the_key(tmp_path):
    with pytest.raises(UserError, match=r"judges.quality.model path /nowhere/judge does not exist"):
        pools.check(_config(model="/nowhere/judge"), longest_prompt=20)
    with pytest.raises(
        UserError, match=r"judges.quality.model: .* is a GPT2ForSequenceClassification, not a causal LM: a judge generates"
    ):
        pools.check(_config(model=str(short_preferring_reward_model())), longest_prompt=20)
    with pytest.raises(UserError, match=r"judges.quality.pool.max_model_len: the judge's context of 64 tokens .* at least 124"):
        pools.check(_config(pool={"max_model_len": 64}), longest_prompt=88)
    assert pools.check(_config(), longest_prompt=20) == {"quality": 256}
