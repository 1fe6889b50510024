"""A dead engine is replaced; its groups are generated elsewhere exactly once; the replacement
serves only with the canonical tokenizer and the current weights. Runs after test_pool.py: it
replaces one of the session pool's engines."""

import collections
import os

import psutil
import pytest

from orchestrator.builtin import search_task
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.groups import make_groups
from orchestrator.rollout.parquet import rollout_table
from orchestrator.rollout.samples import StepSamples

pytestmark = pytest.mark.engines


def _vllm_engine_process(actor_pid: int) -> psutil.Process:
    for child in psutil.Process(actor_pid).children(recursive=True):
        if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name():
            return child
    raise AssertionError(f"no vLLM engine process under actor pid {actor_pid}")


def test_killed_engine_process_is_replaced_and_its_groups_are_not_lost(pool, learner_tokenizer):
    import ray

    synced = []
    pool.engines.on_engine_ready = lambda engine_id, actor: synced.append(engine_id)  # the train loop syncs weights here
    victim = min(pool.engines.actors)
    _vllm_engine_process(
        ray.get(pool.engines.actors[victim].__ray_call__.remote(lambda worker: os.getpid()))
    ).kill()  # SIGKILL from outside, by pid

    prompts = search_task.prompts(12, seed=11)
    requests = make_groups(
        prompts, [learner_tokenizer(p)["input_ids"] for p in prompts], 3, SamplingConfig(max_tokens=12, seed=0)
    )
    rows = rollout_table(StepSamples.assemble(requests, pool.generate(requests))).to_pylist()
    assert [(r["group_id"], r["sample_index"]) for r in rows] == [(g, s) for g in range(12) for s in range(3)]
    assert victim not in {r["engine_id"] for r in rows}
    assert pool.engines.restarts == 1 and victim not in pool.engines.actors

    pool.engines.admit_ready(block=True)  # the replacement: fingerprint checked, then synced
    [replacement] = synced
    assert replacement in pool.engines.actors and replacement not in (victim,)
    rows = rollout_table(StepSamples.assemble(requests, pool.generate(requests))).to_pylist()
    assert collections.Counter(r["engine_id"] for r in rows)[replacement] > 0
    pool.engines.on_engine_ready = None
    ray.get([actor.policy_version.remote() for actor in pool.engines.actors.values()])  # every engine answers
