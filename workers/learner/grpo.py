"""`GRPOLearner`: TRL's GRPO update on batches assembled elsewhere. A plain class, tested without Ray.

TRL's `GRPOTrainer` is built once (for its loss, optimizer and scheduler) and driven through its
`compute_loss` seam: the orchestrator's batch carries prompt/completion ids and masks, the
group-normalised advantages and the engines' logprobs as the behaviour (old) logprobs. No second
GRPO loss lives in this project.
"""

from __future__ import annotations

import tempfile
import time

import numpy as np
import torch

from orchestrator.config.train import TrainConfig
from workers.learner.model_setup import load_model, load_tokenizer
from workers.weights.buckets import WeightBucket, pack


LEARNER_STATE = "learner_state.pt"


def _unused_reward(prompts, completions, **kwargs):  # GRPOTrainer wants one; rewards are ours
    raise RuntimeError("rewards are computed by the orchestrator")


class GRPOLearner:
    def __init__(self, config: TrainConfig, model, tokenizer: str):
        """`model` is a name, a path or a model object; `tokenizer` a name or path."""
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        torch.manual_seed(config.seed)
        self.config = config
        self._scratch = tempfile.TemporaryDirectory(prefix="grpo-learner-")
        self.tokenizer = load_tokenizer(tokenizer, config.added_tokens, chat_template=config.chat_template)
        model = load_model(model, self.tokenizer, resize=bool(config.added_tokens))
        use_cpu = not (torch.cuda.is_available() and config.learner.num_gpus > 0)
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
        )
        self.trainer = GRPOTrainer(
            model=model,
            reward_funcs=_unused_reward,
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["unused"]}),
            processing_class=self.tokenizer,
        )
        self.trainer.create_optimizer_and_scheduler(num_training_steps=config.max_steps)
        self.trainer.current_gradient_accumulation_steps = 1
        accelerator = self.trainer.accelerator
        self.model, self.optimizer = accelerator.prepare(self.trainer.model, self.trainer.optimizer)
        self.policy_version = 0
        self._capture_policy_logps()

    def _capture_policy_logps(self) -> None:
        """Keep the per-token logprobs TRL computes inside `compute_loss`, so the sync diagnostic
        (engine vs learner logprobs) costs no extra forward pass."""
        compute = self.trainer._get_per_token_logps_and_entropies

        def capturing(*args, **kwargs):
            result = compute(*args, **kwargs)
            self._policy_logps = result[0].detach()
            return result

        self.trainer._get_per_token_logps_and_entropies = capturing

    @property
    def device(self) -> torch.device:
        return self.trainer.accelerator.device

    def train_step(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """One optimizer step on one batch; returns the step's learner metrics."""
        start = time.perf_counter()
        trainer = self.trainer
        inputs = {key: torch.tensor(value, device=self.device) for key, value in batch.items()}
        # The model's own tokens; a tool's observation tokens (tool_mask 0) are context, not trained on.
        mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
        self.model.train()
        if self.config.beta != 0.0:
            with torch.no_grad():
                inputs["ref_per_token_logps"] = self._logps(trainer.ref_model, inputs)
        inputs["num_items_in_batch"] = mask.sum()
        loss = trainer.compute_loss(self.model, inputs)  # its forward pass leaves the policy logprobs
        abs_diff = (self._policy_logps - inputs["old_per_token_logps"]).abs() * mask
        trainer.accelerator.backward(loss)
        grad_norm = trainer.accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        trainer.lr_scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.policy_version += 1
        tokens = mask.sum().clamp(min=1)
        return {
            "loss": float(loss.detach()),
            "grad_norm": float(grad_norm),
            "learning_rate": float(trainer.lr_scheduler.get_last_lr()[0]),
            "rollout/logprob_abs_diff": float(abs_diff.sum() / tokens),
            "rollout/logprob_max_abs_diff": float(abs_diff.max()),
            "time/learner_step": time.perf_counter() - start,
        }

    def _logps(self, model, inputs) -> torch.Tensor:
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logps, _, _ = self.trainer._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, inputs["completion_ids"].size(1)
        )
        return logps

    def named_weights(self):
        """(HF name, tensor) for every weight, as vLLM's loaders expect them."""
        return self.trainer.accelerator.unwrap_model(self.model).state_dict().items()

    def weight_buckets(self, bucket_bytes: int) -> list[WeightBucket]:
        """The weights in buckets; on CPU their bytes are views of the live weights, valid until the next step."""
        return pack(self.named_weights(), bucket_bytes)

    def save(self, folder: str) -> None:
        """An HF checkpoint (model + canonical tokenizer) that transformers and vLLM load as is, plus
        `learner_state.pt` (optimizer, scheduler, RNG, policy version) for `train --resume`."""
        model = self.trainer.accelerator.unwrap_model(self.model)
        model.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        state = {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.trainer.lr_scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "policy_version": self.policy_version,
        }
        torch.save(state, f"{folder}/{LEARNER_STATE}")

    def load_state(self, folder: str) -> None:
        """Continue exactly where `save` left off (the weights come from the same folder)."""
        state = torch.load(f"{folder}/{LEARNER_STATE}", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.trainer.lr_scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        self.policy_version = state["policy_version"]
