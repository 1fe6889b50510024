"""One step's batch on the learner's device, as the learner's passes take it: cut into micro-batches,
each trimmed to the columns its samples reach, made up with idle rows to the row counts every rank's
i-th micro-batch must share, and the whole step's counts gathered across ranks. Plain functions over
torch tensors; workers/learner/grpo.py drives them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from workers.learner import importance_sampling


@dataclasses.dataclass
class StepInputs:
    """One batch on the device, cut into micro-batches; `rows` and `tokens` count the whole step (every rank)."""

    inputs: dict[str, torch.Tensor]
    chunks: list[tuple[np.ndarray, int]]  # (rows, idle rows to add) of each micro-batch
    rows: int
    tokens: torch.Tensor
    figures: torch.Tensor  # each rank's (rows, micro-batches, tokens, token slots)
    stats: importance_sampling.SamplingStats
    round_tokens: torch.Tensor  # TRL's num_items_in_batch: the generation round's loss tokens (every rank)


# Tensors whose second dimension is the prompt (left-padded) or the completion (right-padded; the
# importance ratio is `[rows, 1]` in the sequence modes, and slicing leaves it so).
_PROMPT_KEYS = ("prompt_ids", "prompt_mask")
_COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "sampling_per_token_logps",
    "old_per_token_logps",
    "ref_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
)


def round_parts(batch: dict[str, np.ndarray], parts: int, seed: int) -> list[dict[str, np.ndarray]]:
    """A generation round's batch shuffled and split into `parts` (TRL's `shuffle_sequence_dict` and
    `split_tensor_dict` for `steps_per_generation`; where the rows do not divide, the first parts get
    one more row instead of the remainder being left out)."""
    if parts == 1:
        return [batch]
    order = np.random.default_rng(seed).permutation(len(batch["completion_mask"]))
    return [{key: value[members] for key, value in batch.items()} for members in np.array_split(order, parts)]


def loss_mask(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The tokens the loss covers: the model's own (`tool_mask`), of real rows (`loss_rows`)."""
    mask = inputs["completion_mask"]
    if "tool_mask" in inputs:
        mask = mask * inputs["tool_mask"]
    return mask * inputs["loss_rows"][:, None] if "loss_rows" in inputs else mask


def trl_inputs(chunk: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The micro-batch as TRL's `compute_loss` takes it: TRL knows one loss mask besides the completion
    mask, `tool_mask`, so a padding row (`loss_rows` 0) reaches it as a row of tool tokens; `stale_rows`
    is the learner's own."""
    if "loss_rows" not in chunk and "stale_rows" not in chunk:
        return chunk
    inputs = {key: value for key, value in chunk.items() if key not in ("loss_rows", "stale_rows")}
    if "loss_rows" in chunk:
        tool_mask = inputs.get("tool_mask", torch.ones_like(inputs["completion_mask"]))
        inputs["tool_mask"] = tool_mask * chunk["loss_rows"][:, None]
    return inputs


def step_counts(rows: int, tokens: torch.Tensor, figures: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(samples, loss tokens) of the whole step across ranks, and every rank's micro-batch `figures`."""
    import torch.distributed as dist

    everyone = [torch.empty_like(tokens) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, tokens)
    table = [torch.empty_like(figures) for _ in range(dist.get_world_size())]
    dist.all_gather(table, figures)
    table = torch.stack(table)
    return int(table[:, 0].sum()), torch.stack(everyone).sum(), table


def largest_across_ranks(value: int, device) -> int:
    import torch.distributed as dist

    largest = torch.tensor(value, dtype=torch.int64, device=device)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    return int(largest)


def micro_batch_metrics(figures: torch.Tensor, seconds: float) -> dict[str, float]:
    """The learner's figures from each rank's (rows, micro-batches, tokens, token slots)."""
    tokens, slots = float(figures[:, 2].sum()), float(figures[:, 3].sum())
    return {
        "learner/micro_batches": float(figures[:, 1].max()),
        "learner/pad_fraction": 1.0 - tokens / slots if slots else 0.0,
        "learner/tokens_per_s": tokens / seconds,
        # The busiest rank's tokens over the mean: the others wait for it at every collective.
        "learner/rank_imbalance": float(figures[:, 2].max()) / max(1.0, float(figures[:, 2].mean())),
    }


def step_loss(loss_sum: torch.Tensor, world_size: int) -> torch.Tensor:
    """This step's loss over all ranks (each rank's loss carries the DDP factor)."""
    import torch.distributed as dist

    dist.all_reduce(loss_sum)
    return loss_sum / world_size


def matched_across_ranks(micro_batches: list[np.ndarray], count: int, device) -> list[tuple[np.ndarray, int]]:
    """(rows, idle rows to add) for each of `count` micro-batches, so that every rank's i-th micro-batch
    has as many rows as the largest i-th of any rank. DDP and TRL's logged metrics make collective calls
    in each micro-batch, and TRL's gather one value per row: the calls and their sizes must match."""
    import torch.distributed as dist

    sizes = torch.zeros(count, dtype=torch.int64, device=device)
    sizes[: len(micro_batches)] = torch.tensor([len(members) for members in micro_batches], dtype=torch.int64)
    everyone = [torch.empty_like(sizes) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, sizes)
    widest = torch.stack(everyone).max(dim=0).values.tolist()
    empty = np.zeros(0, dtype=np.int64)
    members = list(micro_batches) + [empty] * (count - len(micro_batches))
    return [(rows, int(wide) - len(rows)) for rows, wide in zip(members, widest)]


def micro_batch(inputs: dict[str, torch.Tensor], rows: np.ndarray, idle: int = 0) -> dict[str, torch.Tensor]:
    """The micro-batch of `rows`, without the columns none of its samples reach (prompts are left-padded
    and completions right-padded; attention is causal), plus `idle` rows that carry no loss (`loss_rows`
    0) and cost two tokens each: one of prompt, one of completion."""
    device = inputs["completion_mask"].device
    chunk = {key: value.index_select(0, torch.as_tensor(rows, dtype=torch.long, device=device)) for key, value in inputs.items()}
    if idle:
        template = {key: value[:1].expand(idle, *value.shape[1:]).clone() for key, value in inputs.items()}
        template["prompt_mask"].zero_()
        template["prompt_mask"][:, -1] = 1
        template["completion_mask"].zero_()
        template["completion_mask"][:, 0] = 1
        template["sampling_per_token_logps"].zero_()
        for key in ("old_per_token_logps", "ref_per_token_logps"):  # row 0's, under an idle row's, could overflow exp
            if key in template:
                template[key].zero_()
        if "importance_sampling_ratio" in template:
            template["importance_sampling_ratio"].fill_(1.0)
        template["advantages"].zero_()
        real_rows = chunk.pop("loss_rows", torch.ones(len(rows), dtype=template["completion_mask"].dtype, device=device))
        template.pop("loss_rows", None)
        chunk = {key: torch.cat([chunk[key], template[key]]) for key in chunk}
        chunk["loss_rows"] = torch.cat([real_rows, torch.zeros(idle, dtype=real_rows.dtype, device=device)])
    prompt_width = max(1, int(chunk["prompt_mask"].sum(dim=1).max()))
    completion_width = max(1, int(chunk["completion_mask"].sum(dim=1).max()))
    for key in _PROMPT_KEYS:
        chunk[key] = chunk[key][:, -prompt_width:]
    for key in _COMPLETION_KEYS:
        if key in chunk:
            chunk[key] = chunk[key][:, :completion_width]
    return chunk
