"""`GroupDeaths` (orchestrator/rollout/poison.py) without Ray: which groups an engine's death is blamed on,
when a group fails, and what its failure says."""

import ray

from orchestrator.contracts.agents import AgentConfig, AgentUse
from orchestrator.contracts.engine_death import GroupTimeoutError
from orchestrator.contracts.groups import GroupRequest
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.poison import GroupDeaths


def _request(group_id: int, agent: str | None = None) -> GroupRequest:
    use = None if agent is None else AgentUse(config=AgentConfig(fn=agent))
    return GroupRequest(group_id, 10 + group_id, "p", [5, 6], 3, SamplingConfig(), agent=use)


def test_a_death_is_blamed_on_every_group_the_engine_held_and_a_timeout_on_the_group_it_names():
    deaths = GroupDeaths(limit=2)
    held = [_request(0), _request(1), _request(2)]
    assert deaths.engine_died(held, ray.exceptions.ActorDiedError()) == []
    assert all(deaths.suspect(request) for request in held)
    timeout = ray.exceptions.RayTaskError("exchange", "tb", GroupTimeoutError("group 1 did not finish", 1))
    assert deaths.engine_died(held, timeout) == [held[1]]  # only the group named: 0 and 2 keep one death each
    assert not deaths.failed(held[0]) and not deaths.failed(held[2]) and deaths.failed(held[1])


def test_a_prompts_count_outlives_its_group_until_one_of_its_groups_comes_back():
    deaths = GroupDeaths(limit=2)
    first = _request(0)
    later = GroupRequest(40, first.prompt_index, first.prompt, [5, 6], 3, SamplingConfig())  # the next epoch's group
    deaths.engine_died([first], ray.exceptions.ActorDiedError())
    assert deaths.suspect(later)
    deaths.came_back(later)
    assert not deaths.suspect(first)
    for _ in range(2):
        deaths.engine_died([first], ray.exceptions.ActorDiedError())
    assert deaths.failed(later)


def test_a_failed_group_names_itself_what_ran_it_and_the_last_error_in_every_sample():
    deaths = GroupDeaths(limit=2)
    poison = _request(7, agent="agents.py:crash")
    for _ in range(2):
        failed = deaths.engine_died([poison], RuntimeError("vLLM's engine process died: SIGSEGV"))
    assert failed == [poison]
    result = deaths.result(poison, engine_id=4, policy_version=9)
    assert (result.group_id, result.engine_id, result.policy_version, len(result.samples)) == (7, 4, 9, 3)
    error = result.samples[0].error
    assert error.startswith("group 7 (prompt 17, agent agents.py:crash) failed: its prompt's groups were on 2 engines")
    assert "rollout.max_group_deaths=2" in error and "RuntimeError: vLLM's engine process died: SIGSEGV" in error
    assert all(sample.tool_mask == [0] and sample.prompt_ids == [5, 6] for sample in result.samples)  # nothing trained
    assert [sample.sample_index for sample in result.samples] == [0, 1, 2]
