"""The engines-to-learner importance-sampling correction, with TRL's settings and semantics.

The engines sample from their own copy of the policy: in another dtype (bf16 on a GPU), with
top-p/top-k truncation, or from older weights (`max_staleness`). The learner first computes its own
log-prob of every sampled token (the proximal, or old, policy) and weights each token's loss by the
ratio of the learner's probability to the engines' (`vllm_importance_sampling_correction`, on by
default as in TRL). `ratio` is TRL 1.16's computation in `GRPOTrainer._generate_and_score_completions`,
which TRL offers only inside generation; tests/workers/learner/test_importance_sampling.py checks it
against that code for every mode. TRL's loss then multiplies its per-token loss by the ratio.

`SamplingStats` gathers what TRL logs of it (`sampling/importance_sampling_ratio/{min,mean,max}`,
`sampling/sampling_logp_difference/{mean,max}`) over a step's micro-batches, plus `sampling/kl`, an
estimate of KL(engines || learner) over the sampled tokens: the mean of exp(d) - d - 1, with d the
learner's log-prob minus the engines' (never negative; zero when they agree).
"""

from __future__ import annotations

import math

import torch

MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def ratio(
    learner_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """The importance-sampling weight of each token `[rows, tokens]` (token modes) or each sequence
    `[rows, 1]` (sequence modes): exp(learner - engines) over the loss tokens in `mask`, then clipped
    into [clip_min, clip_max] (`*_truncate`) or zeroed outside it (`*_mask`). A NaN engine log-prob
    (none was reported) counts as agreement."""
    difference = torch.nan_to_num((learner_logps - sampling_logps) * mask, nan=0.0)
    if mode.startswith("sequence"):
        difference = difference.sum(dim=-1, keepdim=True)
    weights = torch.exp(difference)
    if mode.endswith("truncate"):
        return torch.clamp(weights, min=clip_min, max=clip_max)
    if mode.endswith("mask"):
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        return weights.masked_fill((weights < low) | (weights > high), 0.0)
    raise ValueError(f"vllm_importance_sampling_mode {mode!r} is not one of {', '.join(MODES)}")


class SamplingStats:
    """The engines-vs-learner figures of one step, summed on the device over its micro-batches."""

    def __init__(self, device: torch.device):
        # sums: |difference|, KL estimate, tokens, ratios, ratios counted; maxima: |difference|, ratio, -ratio
        self.sums = torch.zeros(5, dtype=torch.float64, device=device)
        self.maxima = torch.full((3,), -math.inf, dtype=torch.float64, device=device)

    def add(self, learner_logps, sampling_logps, mask, weights: torch.Tensor | None, real_rows) -> None:
        """One micro-batch: log-probs and `mask` `[rows, tokens]`, the ratio TRL's loss used (None: no
        correction) and which rows are samples (`real_rows` `[rows]`; a rank's idle rows are not)."""
        real = mask.bool() & real_rows.bool()[:, None]
        difference = torch.nan_to_num(learner_logps - sampling_logps, nan=0.0)[real].double()
        kl = torch.exp(difference) - difference - 1.0
        values = torch.zeros(0, dtype=torch.float64, device=difference.device)
        if weights is not None:  # per token, or per sequence (of the rows with a loss token)
            values = weights[real] if weights.size(1) > 1 else weights[real.any(dim=1)][:, 0]
            values = values.double()
        sums = [
            difference.abs().sum(),
            kl.sum(),
            difference.new_tensor(difference.numel()),
            values.sum(),
            values.new_tensor(values.numel()),
        ]
        maxima = [_largest(difference.abs()), _largest(values), _largest(-values)]
        self.sums += torch.stack(sums)
        self.maxima = torch.maximum(self.maxima, torch.stack(maxima))

    def all_reduce(self) -> None:
        """Every rank's figures, for the whole step."""
        import torch.distributed as dist

        dist.all_reduce(self.sums)
        dist.all_reduce(self.maxima, op=dist.ReduceOp.MAX)

    def metrics(self, corrected: bool) -> dict[str, float]:
        (difference, kl, tokens, ratios, counted), (largest, highest, negated_lowest) = self.sums.tolist(), self.maxima.tolist()
        figures = {
            "sampling/sampling_logp_difference/mean": difference / max(1.0, tokens),
            "sampling/sampling_logp_difference/max": max(0.0, largest),
            "sampling/kl": kl / max(1.0, tokens),
        }
        if corrected and counted:
            figures["sampling/importance_sampling_ratio/min"] = -negated_lowest
            figures["sampling/importance_sampling_ratio/mean"] = ratios / counted
            figures["sampling/importance_sampling_ratio/max"] = highest
        return figures


def _largest(values: torch.Tensor) -> torch.Tensor:
    return values.max() if values.numel() else values.new_tensor(-math.inf)
