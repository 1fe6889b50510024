"""Groups on the driver: prompts become one group each (`make_groups`, for every command), and
results are assembled back in request order with every group's shape checked.

Identity is never the prompt text. A group's id is its prompt's position in the list or stream, so
two identical prompts are two groups, each with its own `num_generations` samples, and a sample is
named by `(group_id, sample_index)` alone. The types themselves are in contracts/groups.py; every
request is built by `make_groups` (`train`'s from the prompt stream, in training/requests.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.contracts.agents import AgentUse
from orchestrator.contracts.environments import EnvironmentUse
from orchestrator.contracts.groups import GroupRequest, GroupResult
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.contracts.tools import ToolUse


class GroupShapeError(RuntimeError):
    """A group came back with missing, extra or misnumbered samples."""


def make_groups(
    prompts: list[str],
    prompt_ids: list[list[int]],
    num_generations: int,
    sampling: SamplingConfig,
    tools: ToolUse | None = None,
    group_ids: Sequence[int] | None = None,
    prompt_indices: Sequence[int] | None = None,
    agent: AgentUse | None = None,
    inputs: Sequence[dict] | None = None,
    environment: EnvironmentUse | None = None,
    environment_names: Sequence[str] | None = None,
) -> list[GroupRequest]:
    """One group per prompt, in order; duplicates stay separate groups. A group's id and prompt index
    are its prompt's position in the list unless given: `train` names its groups by stream position and
    prompt-file position (training/requests.py), evaluation rounds and judges by ranges of their own.
    With `agent` or `environment`, `inputs[i]` is prompt i's row (`row_inputs`): what its sessions are called
    with, or its environments' `reset` gets; with `environment`, `environment_names[i]` is its environment."""
    if len(prompts) != len(prompt_ids):
        raise ValueError(f"{len(prompts)} prompts but {len(prompt_ids)} tokenized prompts")
    group_ids = range(len(prompts)) if group_ids is None else group_ids
    prompt_indices = range(len(prompts)) if prompt_indices is None else prompt_indices
    inputs = [None] * len(prompts) if inputs is None else inputs
    names = [None] * len(prompts) if environment is None else environment_names
    return [
        GroupRequest(
            group_id=group_id,
            prompt_index=prompt_index,
            prompt=text,
            prompt_ids=list(ids),
            num_generations=num_generations,
            sampling=sampling,
            tools=tools,
            agent=agent,
            inputs=row,
            environment=environment,
            environment_name=name,
        )
        for group_id, prompt_index, text, ids, row, name in zip(
            group_ids, prompt_indices, prompts, prompt_ids, inputs, names, strict=True
        )
    ]


def row_inputs(prompts, index: int) -> dict:
    """Prompt `index`'s row of `prompts` (a run's PromptSet or its EvalSet: `prompts`, `conversations`,
    `columns`), as an agent session is called with it and an environment's `reset` gets it: the prompt as
    the dataset holds it (its messages, or its text) and the prompt's other columns."""
    prompt = prompts.conversations[index] if prompts.conversations is not None else prompts.prompts[index]
    return {**(dict(prompts.columns[index]) if prompts.columns is not None else {}), "prompt": prompt}


def assemble(requests: list[GroupRequest], results: list[GroupResult]) -> list[tuple[GroupRequest, GroupResult]]:
    """Pair each request with its result in request order, checking every group's shape."""
    by_id: dict[int, GroupResult] = {}
    for result in results:
        if result.group_id in by_id:
            raise GroupShapeError(f"group {result.group_id} came back twice")
        by_id[result.group_id] = result
    wanted = {request.group_id for request in requests}
    extra = sorted(set(by_id) - wanted)
    if extra:
        raise GroupShapeError(f"results for groups that were never requested: {extra[:10]}")
    pairs = []
    for request in requests:
        result = by_id.get(request.group_id)
        if result is None:
            raise GroupShapeError(f"group {request.group_id} (prompt {request.prompt_index}) has no result")
        _check_indices(request, result)
        pairs.append((request, result))
    return pairs


def _check_indices(request: GroupRequest, result: GroupResult) -> None:
    """Samples 0..num_generations-1 in order; a split agent session's segments (0, 1, ...) follow one another
    under their session's index."""
    places = [(sample.sample_index, sample.segment) for sample in result.samples]
    expected = [(index, 0) for index in range(request.num_generations)]
    if [place for place in places if place[1] == 0] != expected or any(
        segment and (index, segment - 1) != previous for previous, (index, segment) in zip([None, *places], places)
    ):
        shown = [index if segment == 0 else f"{index}.{segment}" for index, segment in places]
        raise GroupShapeError(f"group {request.group_id} has sample indices {shown}, expected 0..{request.num_generations - 1}")
