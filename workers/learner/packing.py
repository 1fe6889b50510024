"""Padding-free forward passes: a micro-batch's sequences concatenated into packed rows.

TRL's loss takes a micro-batch as padded `[rows, width]` tensors (prompts left-padded, completions
right-padded). Only the model's forward pass is packed: the real tokens of the sequences are laid
end to end in a few rows, with `position_ids` that restart at 0 for each sequence. transformers reads the
restarts as sequence boundaries (sdpa and eager get a block-diagonal causal mask, flash-attention its
cumulative lengths), so no sequence attends to another and no pad token reaches a matmul. Positions
start at 0 as the engines' do (the padded path's left-padded prompts start later; with rotary
embeddings the two agree up to rounding).

Whether the loaded model honours the boundaries is checked once, at start (`agrees`): its packed
log-probs must equal each sequence's alone. The learner falls back to padded micro-batches otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workers.fences import transformers as fenced_transformers
from workers.learner.micro_batches import place_in_rows

# Attention implementations that read packed sequences from position_ids in the pinned transformers.
PACKABLE_ATTENTION = ("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention")


@dataclass(frozen=True)
class Packed:
    input_ids: torch.Tensor  # [rows, width]
    position_ids: torch.Tensor  # [rows, width]
    labels: torch.Tensor  # [rows, width]: the scored (completion) tokens, -100 elsewhere
    real: torch.Tensor  # [sequences, columns] bool: the real tokens of the padded micro-batch
    destination: torch.Tensor  # where each real token went in the packed rows, flattened
    logits_to_keep: int


def one_row(attention: str | None) -> bool:
    """Whether an attention implementation takes a micro-batch as one packed row. Flash-attention does
    (its kernels see each sequence's own length). sdpa and eager get a block-diagonal mask but still
    compute every pair of tokens in a row, so a row of R tokens costs R x R attention scores: their
    rows are as long as the micro-batch's longest sequence, as padded rows would be, with the room
    that padding would take filled by other sequences."""
    return attention is not None and attention.startswith("flash_attention")


def pack(input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, one_row: bool) -> Packed:
    """The real tokens (`attention_mask` 1) of `input_ids`, sequence by sequence, in one row, or in rows
    as long as the longest sequence (micro_batches.place_in_rows). The last `logits_to_keep` columns
    are the completions, whose tokens are scored. A row shorter than the longest ends in pad tokens at
    position 0, each a sequence of its own."""
    real = attention_mask.bool()
    lengths = real.sum(dim=1)
    positions = attention_mask.long().cumsum(dim=1) - 1
    labels = input_ids.masked_fill(~real, -100)
    labels[:, :-logits_to_keep] = -100
    row_of, offset, width = place_in_rows(lengths.tolist(), one_row)
    start = torch.tensor([row * width + first for row, first in zip(row_of, offset)], device=input_ids.device)
    destination = start.repeat_interleave(lengths) + positions[real]
    rows = max(row_of) + 1

    def laid_out(values: torch.Tensor, fill: int) -> torch.Tensor:
        flat = values.new_full((rows * width,), fill)
        flat[destination] = values[real]
        return flat.view(rows, width)

    return Packed(
        input_ids=laid_out(input_ids, 0),
        position_ids=laid_out(positions, 0),
        labels=laid_out(labels, -100),
        real=real,
        destination=destination,
        logits_to_keep=logits_to_keep,
    )


def unpack(per_token: torch.Tensor, packed: Packed) -> torch.Tensor:
    """A per-token output of the packed rows (`[rows, width - 1]`, entry t for token t + 1, as a causal
    model's shifted outputs are) back to `[sequences, logits_to_keep]`, zero where nothing was scored."""
    shifted = torch.cat([per_token.new_zeros(per_token.size(0), 1), per_token], dim=1)  # nothing predicts a row's first token
    whole = per_token.new_zeros(packed.real.shape).masked_scatter(packed.real, shifted.reshape(-1)[packed.destination])
    return whole[:, -packed.logits_to_keep :]


def supported(model) -> str | None:
    """Why `model` cannot be packed, or None when it may be (to be confirmed by `agrees`)."""
    attention = fenced_transformers.attention_implementation(model)
    if attention not in PACKABLE_ATTENTION:
        return f"attention implementation {attention!r} (packing needs one of {', '.join(PACKABLE_ATTENTION)})"
    return None


def probe_rows(vocab_size: int, device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Two sequences of different lengths as a padded micro-batch (ids, mask, completion width), for `agrees`."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, max(4, vocab_size), (2, 12), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # a shorter prompt, left-padded
    mask[1, -2:] = 0  # a shorter completion, right-padded
    return ids.to(device), mask.to(device), 6


def agrees(
    packed_logps: torch.Tensor, alone_logps: list[torch.Tensor], completion_mask: torch.Tensor, tolerance: float
) -> float | None:
    """The largest difference between the packed log-probs and each sequence's alone, or None when
    it is within `tolerance`."""
    worst = 0.0
    for row, alone in enumerate(alone_logps):
        width = alone.size(-1)
        scored = completion_mask[row, :width].bool()
        difference = (packed_logps[row, :width] - alone[0]).abs()[scored]
        worst = max(worst, float(difference.max()) if difference.numel() else 0.0)
    return None if worst <= tolerance else worst
