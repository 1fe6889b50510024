"""Groups on the driver: a prompt list becomes one group per prompt (`generate`), and results are
assembled back in request order with every group's shape checked (both commands).

Identity is never the prompt text. A group's id is its prompt's position in the list or stream, so
two identical prompts are two groups, each with its own `num_generations` samples, and a sample is
named by `(group_id, sample_index)` alone. The types themselves are in contracts/groups.py;
`train` builds its requests from the prompt stream in training/requests.py.
"""

from __future__ import annotations

from orchestrator.contracts.groups import GroupRequest, GroupResult
from orchestrator.contracts.sampling import SamplingConfig


class GroupShapeError(RuntimeError):
    """A group came back with missing, extra or misnumbered samples."""


def make_groups(
    prompts: list[str], prompt_ids: list[list[int]], num_generations: int, sampling: SamplingConfig
) -> list[GroupRequest]:
    """One group per prompt, in order; duplicates stay separate groups."""
    if len(prompts) != len(prompt_ids):
        raise ValueError(f"{len(prompts)} prompts but {len(prompt_ids)} tokenized prompts")
    return [
        GroupRequest(
            group_id=index,
            prompt_index=index,
            prompt=text,
            prompt_ids=list(ids),
            num_generations=num_generations,
            sampling=sampling,
        )
        for index, (text, ids) in enumerate(zip(prompts, prompt_ids))
    ]


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
        indices = [sample.sample_index for sample in result.samples]
        if indices != list(range(request.num_generations)):
            raise GroupShapeError(
                f"group {request.group_id} has sample indices {indices}, expected 0..{request.num_generations - 1}"
            )
        pairs.append((request, result))
    return pairs
