"""Groups that keep killing their engines: counted, kept apart, and failed by name.

A prompt can make its engine die every time it runs: an agent or tool that crashes the engine's process,
a prompt that trips a bug in the engine, a group that never finishes within `rollout.request_timeout_s`.
Sent to the next engine after each death, such a group would spend every one of `rollout.max_restarts`.

So each engine death is counted against the groups it can be blamed on: the one group a request timeout
names, otherwise every group the engine held (one of them did it, or none did: an engine can die of
other causes). A group with a death against it is a suspect, and the dispatch never puts two suspects
on one engine: the next death of an engine holding a suspect is then that suspect's second, or the
first of a group that was not suspected before. A group that reaches `rollout.max_group_deaths` fails:
its samples come back unanswered (`Sample.unanswered`) with a message that names the group, its prompt,
what ran it (its agent or tools) and the last error; they score `reward_error_score`, or the run stops
with that message. Counts are kept per prompt over the run and cleared when one of its groups comes
back: a prompt that failed fails at once when it comes again (the next epoch, a stale group renewed),
and one that was only near a death starts afresh. Engines that die while their node is drained are
not counted against anyone.

A plain class, tested without Ray; `Dispatch` (dispatch.py) asks it.
"""

from __future__ import annotations

from collections import Counter

from orchestrator.contracts.engine_death import reason
from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample


class GroupDeaths:
    def __init__(self, limit: int):
        self.limit = limit
        self._deaths: Counter[tuple[int, str]] = Counter()  # (prompt index, prompt) -> deaths blamed on it
        self._last: dict[tuple[int, str], str] = {}  # -> the last error

    def suspect(self, request: GroupRequest) -> bool:
        return self._deaths[_key(request)] > 0

    def failed(self, request: GroupRequest) -> bool:
        return self._deaths[_key(request)] >= self.limit

    def came_back(self, request: GroupRequest) -> None:
        """One of the prompt's groups was generated: it is not what kills engines."""
        if self._deaths.pop(_key(request), None) is not None:
            self._last.pop(_key(request), None)

    def engine_died(self, held: list[GroupRequest], error: BaseException) -> list[GroupRequest]:
        """Count an engine's death against the groups it is blamed on (the group a request timeout names,
        else every group the engine `held`); returns those of them that have failed now."""
        named = getattr(getattr(error, "cause", None) or error, "group_id", None)
        blamed = [request for request in held if request.group_id == named] or held
        for request in blamed:
            self._deaths[_key(request)] += 1
            self._last[_key(request)] = reason(error)
        return [request for request in blamed if self.failed(request)]

    def message(self, request: GroupRequest) -> str:
        key = _key(request)
        return (
            f"group {request.group_id} (prompt {request.prompt_index}, {_running(request)}) failed: its prompt's "
            f"groups were on {self._deaths[key]} engines that died (rollout.max_group_deaths={self.limit}); last error: "
            f"{self._last.get(key, 'none recorded')}"
        )

    def result(self, request: GroupRequest, engine_id: int, policy_version: int) -> GroupResult:
        """The failed group's result: every sample unanswered, with `message` as its error."""
        error = self.message(request)
        samples = [Sample.unanswered(request.prompt_ids, index, None, error) for index in range(request.num_generations)]
        return GroupResult(group_id=request.group_id, engine_id=engine_id, policy_version=policy_version, samples=samples)


def _key(request: GroupRequest) -> tuple[int, str]:
    """The prompt: its place in its file, and its text (evaluation prompts come from another file)."""
    return request.prompt_index, request.prompt


def _running(request: GroupRequest) -> str:
    """What ran on the engine besides generation: the group's agent or tools."""
    if request.agent is not None:
        return f"agent {request.agent.config.fn}"
    if request.tools is not None:
        return "tools " + ", ".join(tool.name for tool in request.tools.tools)
    if request.environment is not None:
        environment = request.environment.environments.get(request.environment_name)
        return f"environment {environment.spec}" if environment is not None else "tools " + ", ".join(request.environment.tools)
    return "generation only"
