"""An engine whose processes are SIGKILLed leaves nothing in /dev/shm once the pool has replaced it,
and a pool that shuts down leaves nothing either; what is not the engines' stays.

What the engines own is read here independently of the pool (psutil's view of their processes'
memory maps), and only those names are compared, because other test sessions on the machine
create and remove /dev/shm entries while this one runs."""

import os
import uuid

import psutil
import pytest

from orchestrator.builtin import search_task
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.launch import start_pool
from orchestrator.rollout.groups import make_groups

pytestmark = pytest.mark.engines
SHM = "/dev/shm"


def _shm_names() -> set[str]:
    return set(os.listdir(SHM))


def _actor_pid(actor) -> int:
    import ray

    return ray.get(actor.__ray_call__.remote(lambda worker: os.getpid()))


def _mapped_by_engine(actor_pid: int) -> set[str]:
    """The /dev/shm entries the actor's process and its descendants (vLLM) map that exist now."""
    names = set()
    for process in [psutil.Process(actor_pid), *psutil.Process(actor_pid).children(recursive=True)]:
        names |= {os.path.basename(m.path) for m in process.memory_maps() if os.path.dirname(m.path) == SHM}
    return names & _shm_names()  # psutil drops the "(deleted)" of unlinked ones


def _generate(pool, tokenizer) -> None:
    prompts = search_task.prompts(2, seed=3)
    ids = [tokenizer(p)["input_ids"] for p in prompts]
    assert len(pool.generate(make_groups(prompts, ids, 2, SamplingConfig(max_tokens=4, seed=0)))) == 2


@pytest.mark.slow  # the session's own /dev/shm check (tests/conftest.py) follows every engine test, killed engines included (test_pool_recovery.py)
def test_killed_and_stopped_engines_leave_no_shared_memory(tiny, learner_tokenizer, ray_session):
    before = _shm_names()
    pool = start_pool(ray_session, str(tiny.model_dir), learner_tokenizer, RolloutConfig(engines=1, max_restarts=1))
    try:
        [victim] = pool.engines.actors.values()
        victim_pid = _actor_pid(victim)
        owned_by_victim = _mapped_by_engine(victim_pid) - before
        assert any(name.startswith("psm_") for name in owned_by_victim), owned_by_victim  # vLLM's message queues
        not_the_engines = f"test-not-the-engines-{uuid.uuid4().hex}"
        with open(f"{SHM}/{not_the_engines}", "wb") as f:  # appeared while the engine ran, but not its own
            f.write(b"x")

        vllm = psutil.Process(victim_pid).children(recursive=True)
        for process in vllm:
            process.kill()  # SIGKILL, from outside: no process of the engine gets to clean up
        psutil.wait_procs(vllm, timeout=30)
        assert owned_by_victim & _shm_names(), "killing vLLM left nothing behind: this test shows nothing"

        _generate(pool, learner_tokenizer)  # the pool finds the engine dead and replaces it
        [replacement] = pool.engines.actors.values()
        assert replacement is not victim and pool.engines.restarts == 1
        owned_by_replacement = _mapped_by_engine(_actor_pid(replacement)) - before
        assert owned_by_replacement and not owned_by_replacement & owned_by_victim
        pool.engines.wait_for_clean_ups()
        assert not owned_by_victim & _shm_names(), "the killed engine's shared memory is still there"
    finally:
        pool.shutdown()
    assert not owned_by_replacement & _shm_names(), "the stopped engine's shared memory is still there"
    assert not_the_engines in _shm_names(), "an entry that was not the engine's was removed"
    os.unlink(f"{SHM}/{not_the_engines}")
    assert len(_shm_names() & (owned_by_victim | owned_by_replacement)) == 0  # as many of ours as before they started
