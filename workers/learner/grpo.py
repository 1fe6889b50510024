"""`GRPOLearner`: TRL's GRPO update on batches assembled elsewhere. A plain class, tested without Ray.

TRL's `GRPOTrainer` is built once (for its loss, optimizer and scheduler) and driven through its
`compute_loss` seam: the orchestrator's batch carries prompt/completion ids and masks, the
group-normalised advantages and the engines' logprobs (TRL's `sampling_per_token_logps`). No second
GRPO loss lives in this project. The TRL internals it needs (the per-token logprob forward pass, the
gradient-accumulation count, the switch to TRL's engine correction) go through workers/fences/trl.py.

The old policy is the learner's own before the step's first update, and the engines' samples are
weighted by TRL's importance-sampling correction against it (importance_sampling.py). With one update
per step (`num_iterations` 1) the old log-probs are exactly those of the loss's own forward pass (the
weights have not moved yet), so they cost no pass of their own: the correction is computed from that
pass, before TRL's loss reads it. With more updates, one no-grad pass computes them first.

A step goes through forward and backward in micro-batches formed by length under
`learner.max_tokens_per_micro_batch` (micro_batches.py), accumulating gradients into one optimizer
step per generation round; each micro-batch's TRL loss is weighted so the sum is TRL's loss on the
whole step. Each micro-batch's forward pass is packed, padding-free, when the model allows it
(packing.py, checked at start), and its log-probs come from TRL's fused LM head, in vocabulary
chunks: the logits of a whole micro-batch never exist at once.

As one rank of a data-parallel group (the process joined it first: data_parallel.py), a learner gets
its share of the step's groups; losses are weighted by the whole step's counts and gradients
all-reduced, so every rank takes the optimizer step one learner would take on the whole batch.
With `learner.fsdp` the ranks shard the model instead of each holding it whole (sharding.py); rank 0
keeps the gathered weights for publishing and checkpoints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
import time

import numpy as np
import torch

from orchestrator.contracts.learning import LEARNER_STATE, GRPOSettings
from workers.fences import transformers as fenced_transformers
from workers.fences import trl as fenced_trl
from workers.learner import importance_sampling, micro_batches, packing, sharding
from workers.learner.model_setup import load_model, load_tokenizer

logger = logging.getLogger(__name__)


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
        self.updates = config.max_steps * config.num_iterations  # optimizer steps, for the schedule
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
            delta=config.delta,
            loss_type=config.loss_type,
            importance_sampling_level=config.importance_sampling_level,
            top_entropy_quantile=config.top_entropy_quantile,
            vllm_importance_sampling_correction=config.vllm_importance_sampling_correction,
            vllm_importance_sampling_mode=config.vllm_importance_sampling_mode,
            vllm_importance_sampling_clip_max=config.vllm_importance_sampling_clip_max,
            vllm_importance_sampling_clip_min=config.vllm_importance_sampling_clip_min,
            off_policy_mask_threshold=config.off_policy_mask_threshold,
            scale_rewards=config.scale_rewards,
            max_grad_norm=config.max_grad_norm,
            warmup_steps=config.warmup_steps,
            lr_scheduler_type=config.lr_scheduler_type,
            seed=config.seed,
            max_steps=self.updates,
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
        self.trainer.create_optimizer_and_scheduler(num_training_steps=self.updates)
        # Micro-batches are weighted by `_share` instead: TRL's accumulation divides every micro-batch's
        # loss by the same count, which is exact only when all have the same number of samples.
        fenced_trl.weight_micro_batches_ourselves(self.trainer)
        self.corrected = config.vllm_importance_sampling_correction
        if self.corrected:
            fenced_trl.correct_sampling(self.trainer)
        self._after_loss_pass = None  # set around a compute_loss whose own pass gives the old log-probs
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
        # Every per-token logprob pass (TRL's loss, the reference model) goes through `_per_token_logps`.
        self.packed = False
        unwrapped = self.trainer.accelerator.unwrap_model(self.model)
        self._one_row = packing.one_row(fenced_transformers.attention_implementation(unwrapped))
        fenced_trl.route_per_token_logps(self.trainer, self._per_token_logps)
        self.packed = self._choose_packing()

    def _per_token_logps(self, trl_pass, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """TRL's per-token logprob pass, packed when the model allows it. In `compute_loss`'s pass, the
        log-probs go to `_after_loss_pass` too, before TRL's loss goes on."""
        compute_entropy = kwargs.get("compute_entropy", False)
        extras = {key: value for key, value in kwargs.items() if key not in ("compute_entropy", "batch_size")}
        if self.packed and not args and all(value is None or value is False for value in extras.values()):
            rows = packing.pack(input_ids, attention_mask, logits_to_keep, self._one_row)
            logps, entropies = fenced_trl.fused_logps(
                self.trainer, model, rows.input_ids, rows.position_ids, rows.labels, compute_entropy
            )
            result = (packing.unpack(logps, rows), None if entropies is None else packing.unpack(entropies, rows), None)
        else:  # padded, or what only TRL's pass handles (images, MoE auxiliary loss)
            result = trl_pass(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if compute_entropy and self._after_loss_pass is not None:  # only TRL's loss asks for entropies
            self._after_loss_pass(result[0].detach())
        return result

    def _choose_packing(self) -> bool:
        """`learner.padding_free`: true packs or refuses; null packs when the model agrees (else padded,
        logged); false never packs."""
        setting = self.config.learner.padding_free
        if setting is False:
            return False
        model = self.trainer.accelerator.unwrap_model(self.model)
        why_not = packing.supported(model)
        if fenced_trl.adds_router_loss(self.trainer):  # TRL's own pass computes it; padded micro-batches then
            why_not = "the model adds a router load-balancing loss (MoE), which TRL's padded pass computes"
        why_not = why_not or self._packing_disagrees(model)
        if why_not is None:
            logger.info("learner: padding-free micro-batches (%s)", "one row each" if self._one_row else "packed rows")
            return True
        if setting:
            raise ValueError(
                f"learner.padding_free is true, but this model cannot run packed sequences: {why_not}. Set "
                "learner.padding_free: null (padded micro-batches where packing is unavailable) or false"
            )
        logger.warning("learner: padded micro-batches, because packing is unavailable: %s", why_not)
        return False

    def _packing_disagrees(self, model) -> str | None:
        """Why packing cannot be trusted with this model: its packed log-probs of two sequences must equal
        each sequence's alone (a model that ignores the restarts of position_ids would let one sequence
        attend to the other). Every rank runs it (a sharded forward pass needs them all)."""
        ids, mask, width = packing.probe_rows(model.get_input_embeddings().num_embeddings, self.device)
        with torch.no_grad():
            rows = packing.pack(ids, mask, width, one_row=False)  # the two in rows of their own, then in one
            logps, _ = fenced_trl.fused_logps(self.trainer, self.model, rows.input_ids, rows.position_ids, rows.labels, False)
            apart = packing.unpack(logps, rows)
            rows = packing.pack(ids, mask, width, one_row=True)
            logps, _ = fenced_trl.fused_logps(self.trainer, self.model, rows.input_ids, rows.position_ids, rows.labels, False)
            alone = []
            for row in range(ids.size(0)):
                real = mask[row].bool()
                completion = int(mask[row, -width:].sum())
                single = ids[row][real][None]
                alone.append(fenced_trl.per_token_logps(self.trainer, self.model, single, torch.ones_like(single), completion))
        if self.sharded:
            sharding.reshard(self.model)
        exact = next(model.parameters()).dtype == torch.float32 and not self.config.learner.bf16
        # In half precision log-probs near -15 are 0.06-0.125 apart and the two layouts round differently;
        # attention across sequences moves them by whole units.
        tolerance = 1e-4 if exact else 0.25
        worst = packing.agrees(packing.unpack(logps, rows), alone, mask[:, -width:], tolerance)
        worst = worst or packing.agrees(apart, alone, mask[:, -width:], tolerance)
        return None if worst is None else f"its packed log-probs differ from each sequence's alone by up to {worst:.3g}"

    @property
    def device(self) -> torch.device:
        return self.trainer.accelerator.device

    def train_step(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """`num_iterations` optimizer steps on one batch (one generation round); returns the round's
        learner metrics (losses, gradient norms and TRL's loss figures averaged over its updates)."""
        start = time.perf_counter()
        trainer = self.trainer
        learner = self.config.learner
        step = self._prepare(batch, learner.micro_batch_size, learner.max_tokens_per_micro_batch)
        passes = {}
        if self.config.num_iterations > 1:
            began = time.perf_counter()
            self._old_policy(step)
            passes["time/old_logps"] = time.perf_counter() - began
        updates = []
        for _ in range(self.config.num_iterations):
            metrics = self._accumulate(step)
            grad_norm = trainer.accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
            self.optimizer.step()
            trainer.lr_scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
            updates.append({**metrics, **fenced_trl.take_loss_metrics(trainer), "grad_norm": float(grad_norm)})
        self.policy_version += 1
        self._gather_weights()
        return {
            **{key: float(np.mean([update[key] for update in updates])) for key in updates[0]},
            **step.stats.metrics(self.corrected),
            **passes,
            "learning_rate": float(trainer.lr_scheduler.get_last_lr()[0]),
            "time/learner_step": time.perf_counter() - start,
        }

    def accumulate_gradients(
        self, batch: dict[str, np.ndarray], micro_batch_size: int | None, max_tokens: int | None
    ) -> dict[str, float]:
        """Backward passes over the batch in micro-batches (micro_batches.py: at most `micro_batch_size`
        samples and `max_tokens` token slots each; None: no such limit), accumulating into `.grad` the
        gradient of the whole batch's loss; no optimizer step. Returns the batch's loss, the
        engines-vs-learner figures and the micro-batches' figures.

        As one of several ranks, `batch` is this rank's shard: `.grad` then holds the gradient of the whole
        step's loss (all ranks' shards), and the figures returned are the whole step's."""
        step = self._prepare(batch, micro_batch_size, max_tokens)
        if self.config.num_iterations > 1:
            self._old_policy(step)
        return {**self._accumulate(step), **step.stats.metrics(self.corrected)}

    def _prepare(self, batch: dict[str, np.ndarray], micro_batch_size: int | None, max_tokens: int | None) -> _Step:
        """The batch on the device, cut into micro-batches (matched across ranks)."""
        prompt_lengths, completion_lengths = batch["prompt_mask"].sum(axis=1), batch["completion_mask"].sum(axis=1)
        if self.world_size > 1 and not self.packed and max_tokens is not None:
            # Ranks' i-th micro-batches are made up to the same rows, and padded an idle row costs the full
            # width: micro-batches of as many rows as the budget holds at the step's longest sample keep
            # every rank's within the budget.
            longest = _largest_across_ranks(int((prompt_lengths + completion_lengths).max()), self.device)
            micro_batch_size = min(micro_batch_size or max_tokens, max(1, max_tokens // longest))
            max_tokens = micro_batch_size * longest
        plan = micro_batches.plan(prompt_lengths, completion_lengths, max_tokens, micro_batch_size, self.packed, self._one_row)
        inputs = {key: torch.tensor(value, device=self.device) for key, value in batch.items()}
        # The model's own tokens; a tool's observation tokens (tool_mask 0) are context, not trained on.
        mask = _loss_mask(inputs)
        rows, tokens = mask.size(0), mask.sum()
        figures = torch.tensor([rows, len(plan.micro_batches), plan.tokens, plan.slots], dtype=torch.float64, device=self.device)
        chunks = [(members, 0) for members in plan.micro_batches]  # (rows, idle rows to add)
        if self.world_size > 1:
            rows, tokens, figures = _step_counts(rows, tokens, figures)
            chunks = _matched_across_ranks(plan.micro_batches, int(figures[:, 1].max()), self.device)
        step = _Step(inputs, chunks, rows, tokens, figures, importance_sampling.SamplingStats(self.device))
        return step

    def _old_policy(self, step: _Step) -> None:
        """The learner's log-probs of the batch before any update (TRL's `old_per_token_logps`), and the
        engine correction against them, in one no-grad pass over the micro-batches."""
        inputs = step.inputs
        old = torch.zeros_like(inputs["sampling_per_token_logps"])
        with torch.no_grad():
            for members, idle in step.chunks:
                logps = self._logps(self.model, _micro_batch(inputs, members, idle))
                old[torch.as_tensor(members, dtype=torch.long, device=self.device), : logps.size(1)] = logps[: len(members)]
        if self.sharded:
            sharding.reshard(self.model)
        inputs["old_per_token_logps"] = old
        weights = self._correction(old, inputs, step.stats)
        if weights is not None:
            inputs["importance_sampling_ratio"] = weights
        if self.world_size > 1:
            step.stats.all_reduce()

    def _correction(self, learner_logps: torch.Tensor, inputs: dict[str, torch.Tensor], stats) -> torch.Tensor | None:
        """TRL's importance-sampling ratio of `inputs`' samples (None when the correction is off), with
        the engines-vs-learner figures added to `stats`."""
        config, mask = self.config, _loss_mask(inputs)
        weights = None
        if self.corrected:
            weights = importance_sampling.ratio(
                learner_logps,
                inputs["sampling_per_token_logps"],
                mask,
                config.vllm_importance_sampling_mode,
                config.vllm_importance_sampling_clip_min,
                config.vllm_importance_sampling_clip_max,
            )
        real_rows = inputs.get("loss_rows", torch.ones_like(mask[:, 0]))
        stats.add(learner_logps, inputs["sampling_per_token_logps"], mask, weights, real_rows)
        return weights

    def _accumulate(self, step: _Step) -> dict[str, float]:
        """One backward pass over the step's micro-batches; no optimizer step."""
        start = time.perf_counter()
        self.model.train()
        # The old log-probs: computed before (several updates), or those of each micro-batch's own loss pass.
        own_pass = "old_per_token_logps" not in step.inputs
        loss_sum = torch.zeros((), device=self.device)  # summed on the device: reading it would wait for a GPU
        for index, (members, idle) in enumerate(step.chunks):
            chunk = _micro_batch(step.inputs, members, idle)
            chunk_mask = _loss_mask(chunk)
            if self.config.beta != 0.0:
                with torch.no_grad():
                    chunk["ref_per_token_logps"] = self._logps(self.trainer.ref_model, chunk)
            # TRL's token-level losses (dapo, cispo) divide by this: the whole step's token count, so
            # micro-batch losses add up to the step's loss.
            chunk["num_items_in_batch"] = step.tokens
            trl_inputs = _trl_inputs(chunk)
            if own_pass:  # TRL's loss reads the ratio after its forward pass, which computes the old log-probs
                self._after_loss_pass = lambda logps, trl_inputs=trl_inputs, chunk=chunk: _put_ratio(
                    trl_inputs, self._correction(logps, chunk, step.stats)
                )
            last = index == len(step.chunks) - 1
            # Under DDP only the last micro-batch should all-reduce gradients. Sharded, every micro-batch
            # reduce-scatters its own: holding them back would keep a whole unsharded gradient per rank.
            try:
                with contextlib.nullcontext() if last or self.sharded else self.trainer.accelerator.no_sync(self.model):
                    loss = self.trainer.compute_loss(self.model, trl_inputs) * self._share(chunk_mask, step.rows, step.tokens)
                    self.trainer.accelerator.backward(loss)
            finally:
                self._after_loss_pass = None
            loss_sum += loss.detach()
        if own_pass and self.world_size > 1:
            step.stats.all_reduce()
        if self.world_size > 1:
            loss_sum = _step_loss(loss_sum, self.world_size)
        return {"loss": float(loss_sum), **_micro_batch_metrics(step.figures.reshape(-1, 4), time.perf_counter() - start)}

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


@dataclasses.dataclass
class _Step:
    """One batch on the device, cut into micro-batches; `rows` and `tokens` count the whole step (every rank)."""

    inputs: dict[str, torch.Tensor]
    chunks: list[tuple[np.ndarray, int]]  # (rows, idle rows to add) of each micro-batch
    rows: int
    tokens: torch.Tensor
    figures: torch.Tensor  # each rank's (rows, micro-batches, tokens, token slots)
    stats: importance_sampling.SamplingStats


# Tensors whose second dimension is the prompt (left-padded) or the completion (right-padded; the
# importance ratio is `[rows, 1]` in the sequence modes, and slicing leaves it so).
_PROMPT_KEYS = ("prompt_ids", "prompt_mask")
_COMPLETION_KEYS = (
    "completion_ids",
    "completion_mask",
    "sampling_per_token_logps",
    "old_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
)


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


def _step_counts(rows: int, tokens: torch.Tensor, figures: torch.Tensor) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(samples, loss tokens) of the whole step across ranks, and every rank's micro-batch `figures`."""
    import torch.distributed as dist

    everyone = [torch.empty_like(tokens) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, tokens)
    table = [torch.empty_like(figures) for _ in range(dist.get_world_size())]
    dist.all_gather(table, figures)
    table = torch.stack(table)
    return int(table[:, 0].sum()), torch.stack(everyone).sum(), table


def _largest_across_ranks(value: int, device) -> int:
    import torch.distributed as dist

    largest = torch.tensor(value, dtype=torch.int64, device=device)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    return int(largest)


def _micro_batch_metrics(figures: torch.Tensor, seconds: float) -> dict[str, float]:
    """The learner's figures from each rank's (rows, micro-batches, tokens, token slots)."""
    tokens, slots = float(figures[:, 2].sum()), float(figures[:, 3].sum())
    return {
        "learner/micro_batches": float(figures[:, 1].max()),
        "learner/pad_fraction": 1.0 - tokens / slots if slots else 0.0,
        "learner/tokens_per_s": tokens / seconds,
        # The busiest rank's tokens over the mean: the others wait for it at every collective.
        "learner/rank_imbalance": float(figures[:, 2].max()) / max(1.0, float(figures[:, 2].mean())),
    }


def _step_loss(loss_sum: torch.Tensor, world_size: int) -> torch.Tensor:
    """This step's loss over all ranks (each rank's loss carries the DDP factor)."""
    import torch.distributed as dist

    dist.all_reduce(loss_sum)
    return loss_sum / world_size


def _put_ratio(trl_inputs: dict[str, torch.Tensor], weights: torch.Tensor | None) -> None:
    if weights is not None:
        trl_inputs["importance_sampling_ratio"] = weights


def _matched_across_ranks(micro_batches: list[np.ndarray], count: int, device) -> list[tuple[np.ndarray, int]]:
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


def _micro_batch(inputs: dict[str, torch.Tensor], rows: np.ndarray, idle: int = 0) -> dict[str, torch.Tensor]:
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
