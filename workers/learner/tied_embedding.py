"""A tied input embedding's gradient added straight into `.grad`, for models whose output layer is
their input embedding (Qwen2.5 up to 3B, Llama 3.2; not a lookup of its own, as Gemma's).

Autograd sums all of a leaf's gradients before it adds them to `.grad`. With tied embeddings the
output layer's gradient (vocabulary x hidden: 545 MB in float32 for Qwen2.5-0.5B) is done first and
waits in autograd's buffer through the whole backward pass, until the lookup's gradient arrives at
the end: a dense tensor as large again, for the few hundred rows a micro-batch uses. Measured on
Qwen2.5-0.5B's architecture (CPU), a second micro-batch's backward peaked 1.06 GB above what the
learner held once it was done, and the lookup's dense backward took 0.6 s.

Here the lookup's backward adds its rows into the weight's `.grad` itself (`index_add_`) and is no
autograd edge into the weight, so the output layer's gradient is added to `.grad` as soon as it is
done. The sum is the same up to the order of float additions.

Only for a learner of one process: DDP and FSDP reduce a gradient from a hook on autograd's own
accumulation, which would run before the rows are added. Not for a frozen embedding (LoRA) either.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)


class _LookupIntoGrad(torch.autograd.Function):
    """`F.embedding(ids, weight)` whose backward adds into `weight.grad`. `anchor` is an empty tensor
    that requires grad, so the output does too without an edge into the weight."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, anchor: torch.Tensor, embedding: torch.nn.Embedding) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.embedding = embedding
        return torch.nn.functional.embedding(ids, embedding.weight.detach(), embedding.padding_idx)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        weight = ctx.embedding.weight
        ids, rows = ids.reshape(-1), grad.reshape(-1, grad.shape[-1]).to(weight.dtype)
        if ctx.embedding.padding_idx is not None:  # as F.embedding: the padding row gets no gradient
            keep = ids != ctx.embedding.padding_idx
            ids, rows = ids[keep], rows[keep]
        if weight.grad is None:
            weight.grad = torch.zeros_like(weight)
        weight.grad.index_add_(0, ids, rows)
        return None, None, None


def accumulate_directly(model, world_size: int, sharded: bool) -> bool:
    """Route the tied input embedding's gradient straight into `.grad` when that is safe (see the
    module's docstring); returns whether it did."""
    embedding = model.get_input_embeddings()
    output = model.get_output_embeddings()
    if world_size > 1 or sharded or output is None or output.weight is not embedding.weight:
        return False
    # Exactly nn.Embedding: a subclass may change the lookup (Gemma's scales it), which the hook replaces.
    if type(embedding) is not torch.nn.Embedding or not embedding.weight.requires_grad:
        return False
    if embedding.max_norm is not None or embedding.scale_grad_by_freq or embedding.sparse:
        return False  # lookups with a gradient of their own kind: left to autograd
    anchor = torch.empty(0, requires_grad=True)

    def lookup(module, args, output):
        if not torch.is_grad_enabled() or not args:
            return output
        return _LookupIntoGrad.apply(args[0], anchor, module)

    embedding.register_forward_hook(lookup)
    size_mb = embedding.weight.numel() * embedding.weight.element_size() / 1e6
    logger.info("learner: the tied embedding's lookup adds its gradient into .grad (%.0f MB less at a backward's end)", size_mb)
    return True
