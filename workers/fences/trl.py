"""Every use of TRL's private code, checked against the TRL release it was read from (1.16).

The learner (workers/learner/grpo.py) drives `GRPOTrainer` through its public `compute_loss`, but
six things it needs have no public form in TRL 1.16:

- `GRPOTrainer._get_per_token_logps_and_entropies`, the forward pass that gives per-token
  logprobs. The learner calls it for the reference model's logprobs (`per_token_logps`), and routes
  it through its own function (`route_per_token_logps`): to run the pass packed (padding-free), and
  to keep the policy logprobs `compute_loss` computes anyway, so the engine-vs-learner logprob
  diagnostic costs no second forward pass.
- The fused LM head `GRPOTrainer.__init__` installs on its models (`add_fused_lm_head`, public, but
  installed by the trainer): `model(..., labels=..., fused_lm_head=True)` gives per-token logprobs and
  entropies computed in vocabulary chunks, never the whole logits (`fused_logps`, the packed pass).
- `aux_loss_enabled`: whether TRL's loss wants an MoE router loss from that pass (`adds_router_loss`),
  which only TRL's own, padded, pass computes.
- `current_gradient_accumulation_steps`, which TRL's loss divides by. It looks public, but setting
  it relies on how TRL uses it inside `compute_loss` (`weight_micro_batches_ourselves`).
- `use_vllm`: TRL's loss multiplies by `inputs["importance_sampling_ratio"]` only when the trainer
  generates with vLLM itself (`correct_sampling` turns that on without TRL's vLLM client). The
  learner relies on `_compute_loss` reading that ratio, and `old_per_token_logps`, only after its
  forward pass.
- `_metrics`, where `compute_loss` appends its figures (clip fractions, entropy, KL), each call one
  more value, for `log` to average (`take_loss_metrics`).

The engines' chat-template tool loop (workers/environments/) appends each round of tool results as the
ids TRL's `GRPOTrainer._get_tool_suffix_ids` computes for them (`tool_suffix_ids`): a method that reads
only the processing class, its chat template and kwargs, whether it is a VLM and its tokenizer, called
here on a stand-in that holds those five.

A TRL release may rename, re-sign or stop calling any of these without notice, so importing this
module checks the installed TRL and refuses another release: move `PINNED` only after re-reading
these names in the new release's `trl/trainer/grpo_trainer.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from workers.fences import releases

if TYPE_CHECKING:
    import torch

# pyproject.toml: trl>=1.16,<1.17 (deploy/constraints/*.txt: trl==1.16.0). Patch releases are accepted,
# as the project's own pin accepts them.
PINNED = "1.16"


def check_version(installed: str | None = None) -> None:
    """Raise unless `installed` (default: the imported TRL's version) is a TRL 1.16.x release."""
    if installed is None:
        import trl

        installed = trl.__version__
    releases.check_series(
        "trl",
        installed,
        PINNED,
        "1.17",
        "`_get_per_token_logps_and_entropies`, the fused LM head, `current_gradient_accumulation_steps`, `use_vllm`, "
        "`_metrics` and `_get_tool_suffix_ids` in the new trl/trainer/grpo_trainer.py",
    )


def route_per_token_logps(trainer, route: Callable) -> None:
    """From now on, the trainer's per-token logprob pass (`compute_loss`'s, and `per_token_logps`) is
    `route(trl_pass, model, input_ids, attention_mask, logits_to_keep, **kwargs)`, where `trl_pass`
    is TRL's own, taking the same arguments; it returns TRL's (logps, entropies, aux_loss)."""
    trl_pass = trainer._get_per_token_logps_and_entropies

    def routed(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        return route(trl_pass, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)

    trainer._get_per_token_logps_and_entropies = routed


def fused_logps(trainer, model, input_ids, position_ids, labels, compute_entropy: bool):
    """(logprob of each next token, entropies or None), `[rows, tokens - 1]`, zero where `labels` is
    -100, through the fused LM head TRL's trainer gave `model` (no whole logits), under the trainer's
    autocast as TRL's own pass runs."""
    with trainer.accelerator.autocast():
        outputs = model(input_ids=input_ids, position_ids=position_ids, labels=labels, fused_lm_head=True)
    return outputs.log_probs, outputs.entropy if compute_entropy else None


def per_token_logps(trainer, model, input_ids, attention_mask, logits_to_keep: int) -> torch.Tensor:
    """`model`'s logprob of each of the last `logits_to_keep` tokens, computed as TRL's loss computes
    them. Called through the trainer's attribute, so a route installed by `route_per_token_logps`
    takes these too."""
    logps, _, _ = trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep)
    return logps


def adds_router_loss(trainer) -> bool:
    """Whether TRL's loss asks its per-token pass for an MoE router load-balancing loss
    (`aux_loss_enabled`, set in `GRPOTrainer.__init__` from the model's config)."""
    return bool(trainer.aux_loss_enabled)


def correct_sampling(trainer) -> None:
    """Make TRL's loss weight each token by `inputs["importance_sampling_ratio"]`, as it does when it
    generates with vLLM (the trainer was built with `vllm_importance_sampling_correction=True`, and
    `use_vllm` false so that TRL starts no vLLM of its own)."""
    if not trainer.vllm_importance_sampling_correction:
        raise ValueError("the trainer was built with vllm_importance_sampling_correction=False")
    trainer.use_vllm = True


def take_loss_metrics(trainer) -> dict[str, float]:
    """The mean of each figure TRL's loss logged since the last call (NaNs left out, as TRL's `log`
    does), and TRL's record of them emptied."""
    logged = trainer._metrics["train"]
    means = {}
    for name, values in logged.items():
        valid = [value for value in values if not math.isnan(value)]
        if valid:
            means[name] = sum(valid) / len(valid)
    logged.clear()
    return means


def weight_micro_batches_ourselves(trainer) -> None:
    """Stop TRL dividing each micro-batch's loss by its accumulation count; the caller weights them.
    TRL divides by the count it would accumulate over, which is exact only when every micro-batch has
    the same number of samples."""
    trainer.current_gradient_accumulation_steps = 1


def tool_suffix_ids(tokenizer, chat_template: str | None, tool_messages: list[dict]) -> list[int]:
    """The ids TRL appends after a reply whose tool calls returned `tool_messages`: the template's rendering
    of those messages and the next assistant header, cut where a reply's end-of-turn token leaves off."""
    import types
    import warnings

    with warnings.catch_warnings():  # on an engine: TRL warns that it was tested up to an older vLLM
        warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions")
        from trl import GRPOTrainer

    holder = types.SimpleNamespace(
        processing_class=tokenizer, chat_template=chat_template, chat_template_kwargs={}, _is_vlm=False, _tokenizer=tokenizer
    )
    return list(GRPOTrainer._get_tool_suffix_ids(holder, tool_messages))


check_version()
