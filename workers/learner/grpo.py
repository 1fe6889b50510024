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
Samples of an older policy version than the learner's (async mode: `stale_rows`) are the exception:
their old log-probs are the engines' (PPO's clip then bounds the update against the policy that drew
them, and no engine correction applies), since one version's drift is far beyond what the correction's
weights can carry (the async run collapsed with them).

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
import itertools
import logging
import tempfile
import time

import numpy as np
import torch

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.learning import GRPOSettings
from workers.fences import transformers as fenced_transformers
from workers.fences import trl as fenced_trl
from workers.learner import (
    checkpoint,
    importance_sampling,
    lora,
    micro_batches,
    packing,
    sharding,
    step_inputs,
    tied_embedding,
)
from workers.learner.model_setup import load_model, load_tokenizer

logger = logging.getLogger(__name__)


def _unused_reward(prompts, completions, **kwargs):  # GRPOTrainer wants one; rewards are ours
    raise RuntimeError("rewards are computed by the orchestrator")


class GRPOLearner:
    def __init__(self, config: GRPOSettings, model, tokenizer: str):
        """`model` is a name, a path or a model object; `tokenizer` a name or path."""
        from datasets import Dataset
        from trl import GRPOTrainer

        if config.learner.num_gpus and not torch.cuda.is_available():
            # Training on the CPU instead would only show as NCCL dying in the first weight sync.
            raise UserError(
                f"learner.num_gpus is {config.learner.num_gpus} but torch {torch.__version__} sees no GPU here "
                f"(CUDA build: {torch.version.cuda or 'none, a CPU build'}): install the CUDA build of torch "
                "(`make install DEVICE=gpu` in a venv of its own), or update the NVIDIA driver (580 or newer for CUDA 13.0)"
            )
        torch.manual_seed(config.seed)
        self.config = config
        # Optimizer steps, for the schedule: each round's parts, num_iterations times.
        self.updates = config.max_steps * config.num_iterations * config.steps_per_generation
        self._scratch = tempfile.TemporaryDirectory(prefix="grpo-learner-")
        self.tokenizer = load_tokenizer(tokenizer, config.added_tokens, chat_template=config.chat_template)
        model = load_model(model, self.tokenizer, resize=bool(config.added_tokens), revision=_revision(config, model))
        # num_gpus null (not decided by a cluster, e.g. built directly): a GPU if this process sees one.
        use_cpu = not torch.cuda.is_available() or config.learner.num_gpus == 0
        args = _grpo_config(config, self._scratch.name, self.updates, use_cpu)
        self.trainer = GRPOTrainer(
            model=model,
            reward_funcs=_unused_reward,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["unused"]}),
            processing_class=self.tokenizer,
            peft_config=None if config.lora is None else lora.peft_config(config.lora),
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
        tied_embedding.accumulate_directly(unwrapped, self.world_size, self.sharded)  # logs when it does
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
            raise UserError(
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
        """One generation round: its batch shuffled into `steps_per_generation` parts, an optimizer step
        on each, and all of that `num_iterations` times (TRL's order); returns the round's learner metrics
        (losses, gradient norms and TRL's loss figures averaged over its updates)."""
        start = time.perf_counter()
        trainer, learner = self.trainer, self.config.learner
        parts, passes = self.prepare_round(batch, learner.micro_batch_size, learner.max_tokens_per_micro_batch)
        updates = []
        for _ in range(self.config.num_iterations):
            for part in parts:
                metrics = self.accumulate_gradients(part)
                grad_norm = trainer.accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
                self.optimizer.step()
                trainer.lr_scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                updates.append({**metrics, **fenced_trl.take_loss_metrics(trainer), "grad_norm": float(grad_norm)})
        self.policy_version += 1
        self._gather_weights()
        return {
            **_mean_over(updates),
            **passes,
            "learning_rate": float(trainer.lr_scheduler.get_last_lr()[0]),
            "time/learner_step": time.perf_counter() - start,
        }

    def prepare_round(
        self, batch: dict[str, np.ndarray], micro_batch_size: int | None, max_tokens: int | None
    ) -> tuple[list[step_inputs.StepInputs], dict[str, float]]:
        """The round's parts on the device (step_inputs.round_parts), each cut into micro-batches (at most
        `micro_batch_size` samples and `max_tokens` token slots each; None: no such limit), and, when an
        update comes after another, the old log-probs of them all before the first; the parts share one
        engines-vs-learner tally, and TRL's token-level losses divide by the whole round's tokens. Also
        the time that pass took (`time/old_logps`), when it ran.

        As one of several ranks, `batch` is this rank's shard (its parts then give the gradient of the
        whole step's loss, all ranks' shards, and the figures of the whole step)."""
        stats = importance_sampling.SamplingStats(self.device)
        parts = [
            self._prepare(part, micro_batch_size, max_tokens, stats)
            for part in step_inputs.round_parts(batch, self.config.steps_per_generation, self.round_seed())
        ]
        round_tokens = sum(part.tokens for part in parts)
        for part in parts:
            part.round_tokens = round_tokens
        if not self.needs_old_policy_pass(len(parts)):
            return parts, {}
        began = time.perf_counter()
        for part in parts:
            self._old_policy(part)
        if self.world_size > 1:
            stats.all_reduce()
        return parts, {"time/old_logps": time.perf_counter() - began}

    def accumulate_gradients(self, part: step_inputs.StepInputs) -> dict[str, float]:
        """Backward passes over a part's micro-batches, accumulating into `.grad` the gradient of its
        loss; no optimizer step. Returns its loss, the micro-batches' figures and the round's
        engines-vs-learner figures."""
        return {**self._accumulate(part), **part.stats.metrics(self.corrected)}

    def needs_old_policy_pass(self, parts: int) -> bool:
        """Whether the round needs the old log-probs before its first update: only when an update comes
        after another (several parts, or num_iterations). With one update, its own forward pass gives them
        (detached, as TRL's loss takes them), and the engine correction with them: the same loss."""
        return parts > 1 or self.config.num_iterations > 1

    def round_seed(self) -> int:
        """Seeds the shuffle of the next round's parts: the same on every rank, and on a resumed run."""
        return self.config.seed * 1_000_003 + self.policy_version

    def _prepare(
        self, batch: dict[str, np.ndarray], micro_batch_size: int | None, max_tokens: int | None, stats
    ) -> step_inputs.StepInputs:
        """The batch on the device, cut into micro-batches (matched across ranks); its engines-vs-learner
        figures go to `stats`."""
        prompt_lengths, completion_lengths = batch["prompt_mask"].sum(axis=1), batch["completion_mask"].sum(axis=1)
        if self.world_size > 1 and not self.packed and max_tokens is not None:
            # Ranks' i-th micro-batches are made up to the same rows, and padded an idle row costs the full
            # width: micro-batches of as many rows as the budget holds at the step's longest sample keep
            # every rank's within the budget.
            longest = step_inputs.largest_across_ranks(int((prompt_lengths + completion_lengths).max()), self.device)
            micro_batch_size = min(micro_batch_size or max_tokens, max(1, max_tokens // longest))
            max_tokens = micro_batch_size * longest
        plan = micro_batches.plan(prompt_lengths, completion_lengths, max_tokens, micro_batch_size, self.packed, self._one_row)
        inputs = {key: torch.tensor(value, device=self.device) for key, value in batch.items()}
        # The model's own tokens; a tool's observation tokens (tool_mask 0) are context, not trained on.
        mask = step_inputs.loss_mask(inputs)
        rows, tokens = mask.size(0), mask.sum()
        figures = torch.tensor([rows, len(plan.micro_batches), plan.tokens, plan.slots], dtype=torch.float64, device=self.device)
        chunks = [(members, 0) for members in plan.micro_batches]  # (rows, idle rows to add)
        if self.world_size > 1:
            rows, tokens, figures = step_inputs.step_counts(rows, tokens, figures)
            chunks = step_inputs.matched_across_ranks(plan.micro_batches, int(figures[:, 1].max()), self.device)
        return step_inputs.StepInputs(inputs, chunks, rows, tokens, figures, stats, round_tokens=tokens)

    def _old_policy(self, step: step_inputs.StepInputs) -> None:
        """The learner's log-probs of the batch before any update (TRL's `old_per_token_logps`), and the
        engine correction against them, in one no-grad pass over the micro-batches (the caller
        all-reduces `step.stats` once every part has been through)."""
        inputs = step.inputs
        old = torch.zeros_like(inputs["sampling_per_token_logps"])
        reference = torch.zeros_like(old) if self.config.beta != 0.0 else None  # fixed too: computed once
        with torch.no_grad():
            for members, idle in step.chunks:
                chunk = step_inputs.micro_batch(inputs, members, idle)
                rows = torch.as_tensor(members, dtype=torch.long, device=self.device)
                logps = self._logps(self.model, chunk)
                old[rows, : logps.size(1)] = logps[: len(members)]
                if reference is not None:
                    logps = self._reference_logps(chunk)
                    reference[rows, : logps.size(1)] = logps[: len(members)]
        if self.sharded:
            sharding.reshard(self.model)
        if reference is not None:
            inputs["ref_per_token_logps"] = reference
        behaviour, weights = self._correction(old, inputs, step.stats)
        inputs["old_per_token_logps"] = old if behaviour is None else behaviour
        if weights is not None:
            inputs["importance_sampling_ratio"] = weights

    def _correction(self, learner_logps: torch.Tensor, inputs: dict[str, torch.Tensor], stats):
        """(old log-probs, TRL's importance-sampling ratio) of `inputs`' samples, with the engines-vs-learner
        figures added to `stats`. The old log-probs are None when they are the learner's own (no stale
        row); a stale row's are the engines', with ratio 1. The ratio is None when the correction is off."""
        config, mask = self.config, step_inputs.loss_mask(inputs)
        stale = inputs.get("stale_rows")
        weights, behaviour = None, None
        if self.corrected:
            weights = importance_sampling.ratio(
                learner_logps,
                inputs["sampling_per_token_logps"],
                mask,
                config.vllm_importance_sampling_mode,
                config.vllm_importance_sampling_clip_min,
                config.vllm_importance_sampling_clip_max,
            )
        if stale is not None:
            stale = stale.bool()[:, None]
            behaviour = torch.where(stale, inputs["sampling_per_token_logps"], learner_logps)
            if weights is not None:
                weights = weights.masked_fill(stale, 1.0)
        real_rows = inputs.get("loss_rows", torch.ones_like(mask[:, 0]))
        stats.add(learner_logps, inputs["sampling_per_token_logps"], mask, weights, real_rows)
        return behaviour, weights

    def _accumulate(self, step: step_inputs.StepInputs) -> dict[str, float]:
        """One backward pass over the step's micro-batches; no optimizer step."""
        start = time.perf_counter()
        self.model.train()
        # The old log-probs: computed before (several updates), or those of each micro-batch's own loss pass.
        own_pass = "old_per_token_logps" not in step.inputs
        loss_sum = torch.zeros((), device=self.device)  # summed on the device: reading it would wait for a GPU
        for index, (members, idle) in enumerate(step.chunks):
            chunk = step_inputs.micro_batch(step.inputs, members, idle)
            chunk_mask = step_inputs.loss_mask(chunk)
            if self.config.beta != 0.0 and "ref_per_token_logps" not in chunk:
                with torch.no_grad():
                    chunk["ref_per_token_logps"] = self._reference_logps(chunk)
            # TRL's token-level losses (dapo, cispo, vespo) divide by this, the whole round's token count
            # (over steps_per_generation, which TRL's config holds), so micro-batch losses add up to the part's loss.
            chunk["num_items_in_batch"] = step.round_tokens
            trl_inputs = step_inputs.trl_inputs(chunk)
            if own_pass:  # TRL's loss reads the ratio after its forward pass, which computes the old log-probs
                self._after_loss_pass = lambda logps, trl_inputs=trl_inputs, chunk=chunk: _put_old_policy(
                    trl_inputs, *self._correction(logps, chunk, step.stats)
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
            loss_sum = step_inputs.step_loss(loss_sum, self.world_size)
        return {
            "loss": float(loss_sum),
            **step_inputs.micro_batch_metrics(step.figures.reshape(-1, 4), time.perf_counter() - start),
        }

    def _share(self, chunk_mask: torch.Tensor, rows: int, tokens: torch.Tensor) -> float:
        """The weight of one micro-batch's TRL loss in the step's loss, so that the weighted sum equals
        TRL's loss on the whole step (TRL's own accumulation divides by a fixed step count, exact only
        for equal micro-batches). dapo, cispo and vespo already divide by the step's token count; bnpo is a
        token mean over the micro-batch; grpo, sapo, dr_grpo and luspo are means over its samples.

        With several ranks, `rows` and `tokens` count the whole step, and the weight is multiplied by the
        number of ranks because DDP averages the ranks' gradients (TRL does the same for dapo/cispo by
        dividing their token count by it); padding rows count in the micro-batch's samples, as TRL's
        mean counts them, but carry no loss."""
        loss_type = self.config.loss_type
        if loss_type in ("dapo", "cispo", "vespo"):
            return 1.0
        if loss_type == "bnpo":
            return float(chunk_mask.sum()) * self.world_size / max(1.0, float(tokens))
        return chunk_mask.size(0) * self.world_size / rows

    def _logps(self, model, inputs) -> torch.Tensor:
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        return fenced_trl.per_token_logps(self.trainer, model, input_ids, attention_mask, inputs["completion_ids"].size(1))

    def _reference_logps(self, inputs) -> torch.Tensor:
        """The reference model's log-probs (beta > 0): TRL's reference model, or with LoRA the adapter off."""
        if self.config.lora is None:
            return self._logps(self.trainer.ref_model, inputs)
        with lora.reference(self.trainer.accelerator.unwrap_model(self.model)):
            return self._logps(self.model, inputs)

    def _gather_weights(self) -> None:
        """Sharded, every rank gathers the new weights with the others, and rank 0 keeps them whole
        (`whole_weights`: for the engines and checkpoints; None unsharded)."""
        self.whole_weights = sharding.whole_weights(self.model) if self.sharded else None

    def named_weights(self, adapter_only: bool = False):
        """(HF name, tensor) for every weight, as vLLM's loaders expect them (sharded: on rank 0 only). With
        LoRA the base weights and then the adapter's, under PEFT's names; `adapter_only`: the adapter's."""
        if self.sharded:
            return self.whole_weights.items()
        model = self.trainer.accelerator.unwrap_model(self.model)
        if self.config.lora is None:
            return model.state_dict().items()
        base = [] if adapter_only else lora.base_weights(model)
        return itertools.chain(base, lora.adapter_weights(model))

    def adapter_config(self) -> dict | None:
        """PEFT's adapter_config.json of a LoRA run (engines serve the adapter with it); None without LoRA."""
        if self.config.lora is None:
            return None
        return lora.adapter_config(self.trainer.accelerator.unwrap_model(self.model))

    def save(self, folder: str) -> None:
        """A checkpoint for `train --resume` (checkpoint.py). Sharded, every rank calls this."""
        checkpoint.save(self, folder)

    def load_state(self, folder: str) -> None:
        """Continue exactly where `save` left off (checkpoint.py)."""
        checkpoint.load(self, folder)


def _revision(config, model) -> str | None:
    """The commit a pinned Hub model is read at (orchestrator/hub_pins.py); a checkpoint folder is read as it is."""
    return config.model_revision if isinstance(model, str) and model == config.model else None


def _grpo_config(config: GRPOSettings, scratch: str, updates: int, use_cpu: bool):
    """TRL's GRPOConfig for the run: its loss, optimizer and schedule settings, nothing of TRL's own
    generation or logging (rewards and samples come from the orchestrator)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=scratch,  # TRL wants one; nothing is written there
        per_device_train_batch_size=config.samples_per_step,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        learning_rate=config.learning_rate,
        beta=config.beta,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        delta=config.delta,
        steps_per_generation=config.steps_per_generation,  # TRL's token-level losses divide by it
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
        max_steps=updates,
        use_cpu=use_cpu,
        bf16=config.learner.bf16 and not use_cpu,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_dropout=True,  # the engines sample without dropout; the loss should see the same policy
        **sharding.fsdp_arguments(config),
    )


def _mean_over(updates: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's mean over the step's updates (NaN and a missing value left out)."""
    names = dict.fromkeys(name for update in updates for name in update)
    means = {}
    for name in names:
        values = [update[name] for update in updates if name in update and not np.isnan(update[name])]
        means[name] = float(np.mean(values)) if values else float("nan")
    return means


def _put_old_policy(trl_inputs: dict[str, torch.Tensor], behaviour, weights) -> None:
    """What TRL's loss reads after its forward pass: the old log-probs when they are not that pass's
    own, and the correction's ratio."""
    if behaviour is not None:
        trl_inputs["old_per_token_logps"] = behaviour
    if weights is not None:
        trl_inputs["importance_sampling_ratio"] = weights
