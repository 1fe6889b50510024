"""`GRPOLearner`: TRL's GRPO update on batches assembled elsewhere. A plain class, tested without Ray.

TRL's `GRPOTrainer` is built once (for its loss, optimizer and scheduler) and driven through its
`compute_loss` seam: the orchestrator's batch carries prompt/completion ids and masks, the
group-normalised advantages and the engines' logprobs as the behaviour (old) logprobs. No second
GRPO loss lives in this project. The two TRL internals it needs (the per-token logprob forward
pass, the gradient-accumulation count) go through workers/fences/trl.py.

A step goes through forward and backward in micro-batches of `learner.micro_batch_size` samples
(all at once when null), accumulating gradients into one optimizer step per generation round;
each micro-batch's TRL loss is weighted so the sum is TRL's loss on the whole step.

As one rank of a data-parallel group (the process joined it first: data_parallel.py), a learner gets
its share of the step's groups; losses are weighted by the whole step's counts and gradients
all-reduced, so every rank takes the optimizer step one learner would take on the whole batch.
With `learner.fsdp` the ranks shard the model instead of each holding it whole (sharding.py); rank 0
keeps the gathered weights for publishing and checkpoints.
"""

from __future__ import annotations

import contextlib
import tempfile
import time

import numpy as np
import torch

from orchestrator.contracts.learning import LEARNER_STATE, GRPOSettings
from workers.fences import trl as fenced_trl
from workers.learner import sharding
from workers.learner.model_setup import load_model, load_tokenizer


def _unused_reward(prompts, completions, **kwargs):  # GRPOTrainer wants one; rewards are ours
    raise RuntimeError("rewards are computed by the orchestrator")


class GRPOLearner:
    def __init__(self, config: GRPOSettings, model, tokenizer: str):
        """`model` is a name, a path or a model object; `tokenizer` a name or path."""
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        if config.learner.num_gpus and not torch.cuda.is_available():
            # Training on the CPU instead would only show as NCCL dying in the first weight sync.
            raise RuntimeError(
                f"learner.num_gpus is {config.learner.num_gpus} but torch {torch.__version__} sees no GPU here "
                f"(CUDA build: {torch.version.cuda or 'none, a CPU build'}): install the CUDA build of torch "
                "(`make install DEVICE=gpu` in a venv of its own), or update the NVIDIA driver (580 or newer for CUDA 13.0)"
            )
        torch.manual_seed(config.seed)
        self.config = config
        self._scratch = tempfile.TemporaryDirectory(prefix="grpo-learner-")
        self.tokenizer = load_tokenizer(tokenizer, config.added_tokens, chat_template=config.chat_template)
        model = load_model(model, self.tokenizer, resize=bool(config.added_tokens))
        # num_gpus null (not decided by a cluster, e.g. built directly): a GPU if this process sees one.
        use_cpu = not torch.cuda.is_available() or config.learner.num_gpus == 0
        args = GRPOConfig(
            output_dir=self._scratch.name,  # TRL wants one; nothing is written there
            per_device_train_batch_size=config.samples_per_step,
            num_generations=config.num_generations,
            max_completion_length=config.max_completion_length,
            temperature=config.temperature,
            learning_rate=config.learning_rate,
            beta=config.beta,
            epsilon=config.epsilon,
            epsilon_high=config.epsilon_high,
            loss_type=config.loss_type,
            scale_rewards=config.scale_rewards,
            max_grad_norm=config.max_grad_norm,
            warmup_steps=config.warmup_steps,
            lr_scheduler_type=config.lr_scheduler_type,
            seed=config.seed,
            max_steps=config.max_steps,
            use_cpu=use_cpu,
            bf16=config.learner.bf16 and not use_cpu,
            report_to=[],
            save_strategy="no",
            logging_steps=1,
            disable_dropout=True,  # the engines sample without dropout; the loss should see the same policy
            **sharding.fsdp_arguments(config),
        )
        self.trainer = GRPOTrainer(
            model=model,
            reward_funcs=_unused_reward,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["unused"]}),
            processing_class=self.tokenizer,
        )
        self.trainer.create_optimizer_and_scheduler(num_training_steps=config.max_steps)
        # Micro-batches are weighted by `_share` instead: TRL's accumulation divides every micro-batch's
        # loss by the same count, which is exact only when all have the same number of samples.
        fenced_trl.weight_micro_batches_ourselves(self.trainer)
        accelerator = self.trainer.accelerator
        # Data parallelism comes from accelerate finding the process group open: DDP, or FSDP2 sharding.
        self.sharded = config.learner.fsdp
        if self.sharded:
            sharding.shard_on_cpu(self.trainer)
        self.model, self.optimizer = accelerator.prepare(self.trainer.model, self.trainer.optimizer)
        self.world_size = accelerator.num_processes
        if torch.distributed.is_initialized() and torch.distributed.get_world_size() != self.world_size:
            raise RuntimeError(
                f"this process is one of {torch.distributed.get_world_size()} learner ranks but accelerate sees "
                f"{self.world_size}: set RANK/WORLD_SIZE/LOCAL_RANK before building the learner (data_parallel.join)"
            )
        self.policy_version = 0
        self._gather_weights()
        # Keep the per-token logprobs TRL computes inside `compute_loss`, so the sync diagnostic
        # (engine vs learner logprobs) costs no extra forward pass.
        fenced_trl.capture_policy_logps(self.trainer, self._keep_policy_logps)

    def _keep_policy_logps(self, logps: torch.Tensor) -> None:
        self._policy_logps = logps

    @property
    def device(self) -> torch.device:
        return self.trainer.accelerator.device

    def train_step(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One optimizer step on one batch; returns the step's learner metrics."""
        start = time.perf_counter()
        trainer = self.trainer
        metrics = self.accumulate_gradients(batch, self.config.learner.micro_batch_size)
        grad_norm = trainer.accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        trainer.lr_scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.policy_version += 1
        self._gather_weights()
        return {
            **metrics,
            "grad_norm": float(grad_norm),
            "learning_rate": float(trainer.lr_scheduler.get_last_lr()[0]),
            "time/learner_step": time.perf_counter() - start,
        }

    def accumulate_gradients(self, batch: dict[str, np.ndarray], micro_batch_size: int | None) -> dict[str, float]:
        """Backward passes over the batch in micro-batches of `micro_batch_size` samples (None: one pass),
        accumulating into `.grad` the gradient of the whole batch's loss; no optimizer step. Returns the
        batch's loss and the engine-vs-learner logprob diagnostic.

        As one of several ranks, `batch` is this rank's shard: `.grad` then holds the gradient of the whole
        step's loss (all ranks' shards), and the figures returned are the whole step's."""
        inputs = {key: torch.tensor(value, device=self.device) for key, value in batch.items()}
        # The model's own tokens; a tool's observation tokens (tool_mask 0) are context, not trained on.
        mask = _loss_mask(inputs)
        rows, tokens = mask.size(0), mask.sum()
        passes = rows
        if self.world_size > 1:
            rows, tokens, passes = _step_counts(rows, tokens)
            inputs = _pad_rows(inputs, passes)
        size = micro_batch_size or passes
        self.model.train()
        # Summed on the device: reading each micro-batch's figures would wait for the GPU every time.
        loss_sum, abs_sum, abs_max = (torch.zeros((), device=self.device) for _ in range(3))
        for first in range(0, passes, size):
            chunk = _micro_batch(inputs, first, first + size)
            chunk_mask = _loss_mask(chunk)
            if self.config.beta != 0.0:
                with torch.no_grad():
                    chunk["ref_per_token_logps"] = self._logps(self.trainer.ref_model, chunk)
            # TRL's token-level losses (dapo, cispo) divide by this: the whole step's token count, so
            # micro-batch losses add up to the step's loss.
            chunk["num_items_in_batch"] = tokens
            last = first + size >= passes
            # Under DDP only the last micro-batch should all-reduce gradients. Sharded, every micro-batch
            # reduce-scatters its own: holding them back would keep a whole unsharded gradient per rank.
            with contextlib.nullcontext() if last or self.sharded else self.trainer.accelerator.no_sync(self.model):
                loss = self.trainer.compute_loss(self.model, _trl_inputs(chunk)) * self._share(chunk_mask, rows, tokens)
                self.trainer.accelerator.backward(loss)
            loss_sum += loss.detach()
            # compute_loss's forward pass left the policy logprobs: the sync check costs no extra pass.
            abs_diff = (self._policy_logps - chunk["old_per_token_logps"]).abs() * chunk_mask
            abs_sum += abs_diff.sum()
            abs_max = torch.maximum(abs_max, abs_diff.max())
        if self.world_size > 1:
            loss_sum, abs_sum, abs_max = _step_totals(loss_sum, abs_sum, abs_max, self.world_size)
        return {
            "loss": float(loss_sum),
            "rollout/logprob_abs_diff": float(abs_sum) / max(1.0, float(tokens)),
            "rollout/logprob_max_abs_diff": float(abs_max),
        }

    def _share(self, chunk_mask: torch.Tensor, rows: int, tokens: torch.Tensor) -> float:
        """The weight of one micro-batch's TRL loss in the step's loss, so that the weighted sum equals
        TRL's loss on the whole step (TRL's own accumulation divides by a fixed step count, exact only
        for equal micro-batches). dapo/cispo already divide by the step's token count; bnpo is a token
        mean over the micro-batch; grpo, sapo and dr_grpo are means over its samples.

        With several ranks, `rows` and `tokens` count the whole step, and the weight is multiplied by the
        number of ranks because DDP averages the ranks' gradients (TRL does the same for dapo/cispo by
        dividing their token count by it); padding rows count in the micro-batch's samples, as TRL's
        mean counts them, but carry no loss."""
        loss_type = self.config.loss_type
        if loss_type in ("dapo", "cispo"):
            return 1.0
        if loss_type == "bnpo":
            return float(chunk_mask.sum()) * self.world_size / max(1.0, float(tokens))
        return chunk_mask.size(0) * self.world_size / rows

    def _logps(self, model, inputs) -> torch.Tensor:
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        return fenced_trl.per_token_logps(self.trainer, model, input_ids, attention_mask, inputs["completion_ids"].size(1))

    def _gather_weights(self) -> None:
        """Sharded, every rank gathers the new weights with the others, and rank 0 keeps them whole."""
        self._whole_weights = sharding.whole_weights(self.model) if self.sharded else None

    def named_weights(self):
        """(HF name, tensor) for every weight, as vLLM's loaders expect them (sharded: on rank 0 only)."""
        if self.sharded:
            return self._whole_weights.items()
        return self.trainer.accelerator.unwrap_model(self.model).state_dict().items()

    def save(self, folder: str) -> None:
        """An HF checkpoint (model + canonical tokenizer) that transformers and vLLM load as is, plus
        `learner_state.pt` (optimizer, scheduler, RNG, policy version) for `train --resume`. Sharded,
        every rank calls this (the optimizer state is gathered) and rank 0 writes."""
        optimizer = self._optimizer_state()
        if not self.trainer.accelerator.is_main_process:
            return
        model = self.trainer.accelerator.unwrap_model(self.model)
        model.save_pretrained(folder, safe_serialization=True, state_dict=self._whole_weights)
        self.tokenizer.save_pretrained(folder)
        state = {
            **optimizer,
            "scheduler": self.trainer.lr_scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "policy_version": self.policy_version,
        }
        torch.save(state, f"{folder}/{LEARNER_STATE}")

    def load_state(self, folder: str) -> None:
        """Continue exactly where `save` left off (the weights come from the same folder)."""
        path = f"{folder}/{LEARNER_STATE}"
        state = sharding.read_learner_state(path) if self.sharded else torch.load(path, weights_only=False)
        written_sharded = sharding.WHOLE_OPTIMIZER in state
        if written_sharded != self.sharded:
            raise ValueError(
                f"{folder} was written by a learner with learner.fsdp {str(written_sharded).lower()}; resume it with "
                f"learner.fsdp: {str(written_sharded).lower()}"
            )
        if self.sharded:
            sharding.load_whole_optimizer_state(self.model, self.optimizer.optimizer, state[sharding.WHOLE_OPTIMIZER])
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        self.trainer.lr_scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        self.policy_version = state["policy_version"]

    def _optimizer_state(self) -> dict:
        if self.sharded:
            return {sharding.WHOLE_OPTIMIZER: sharding.whole_optimizer_state(self.model, self.optimizer.optimizer)}
        return {"optimizer": self.optimizer.state_dict()}


# Tensors whose second dimension is the completion: a micro-batch drops the trailing columns none of
# its samples reach (completions are right-padded and attention is causal, so nothing else changes).
_COMPLETION_KEYS = ("completion_ids", "completion_mask", "old_per_token_logps", "tool_mask")


def _loss_mask(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The tokens the loss covers: the model's own (`tool_mask`), of real rows (`loss_rows`)."""
    mask = inputs["completion_mask"]
    if "tool_mask" in inputs:
        mask = mask * inputs["tool_mask"]
    return mask * inputs["loss_rows"][:, None] if "loss_rows" in inputs else mask


def _trl_inputs(chunk: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The micro-batch as TRL's `compute_loss` takes it: TRL knows one loss mask besides the completion
    mask, `tool_mask`, so a padding row (`loss_rows` 0) reaches it as a row of tool tokens."""
    if "loss_rows" not in chunk:
        return chunk
    inputs = {key: value for key, value in chunk.items() if key != "loss_rows"}
    tool_mask = inputs.get("tool_mask", torch.ones_like(inputs["completion_mask"]))
    inputs["tool_mask"] = tool_mask * chunk["loss_rows"][:, None]
    return inputs


def _step_counts(rows: int, tokens: torch.Tensor) -> tuple[int, torch.Tensor, int]:
    """(samples, loss tokens) of the whole step across ranks, and the most samples any rank holds."""
    import torch.distributed as dist

    counts = torch.stack([torch.tensor(rows, device=tokens.device), tokens])
    everyone = [torch.empty_like(counts) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, counts)
    table = torch.stack(everyone)
    return int(table[:, 0].sum()), table[:, 1].sum(), int(table[:, 0].max())


def _step_totals(loss_sum, abs_sum, abs_max, world_size: int):
    """This step's loss and logprob diagnostic over all ranks (each rank's loss carries the DDP factor)."""
    import torch.distributed as dist

    sums = torch.stack([loss_sum, abs_sum])
    dist.all_reduce(sums)
    dist.all_reduce(abs_max, op=dist.ReduceOp.MAX)
    return sums[0] / world_size, sums[1], abs_max


def _pad_rows(inputs: dict[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
    """`inputs` grown to `rows` samples with copies of its last sample that the loss leaves out
    (`loss_rows` 0; every real row 1). Every rank then runs the same micro-batches: DDP and TRL's
    logged metrics make collective calls in each one, and those must match across ranks."""
    extra = rows - inputs["completion_mask"].size(0)
    if extra == 0:
        return inputs
    padded = {key: torch.cat([value, value[-1:].expand(extra, *value.shape[1:])]) for key, value in inputs.items()}
    padded["loss_rows"] = torch.ones(rows, dtype=inputs["completion_mask"].dtype, device=inputs["completion_mask"].device)
    padded["loss_rows"][-extra:] = 0
    return padded


def _micro_batch(inputs: dict[str, torch.Tensor], first: int, end: int) -> dict[str, torch.Tensor]:
    chunk = {key: value[first:end] for key, value in inputs.items()}
    used = chunk["completion_mask"].any(dim=0).nonzero()
    width = int(used.max()) + 1 if used.numel() else 1
    return {key: value[:, :width] if key in _COMPLETION_KEYS else value for key, value in chunk.items()}
