"""The engine correction and several updates per step, against TRL's own code on the same inputs.

TRL computes the importance-sampling ratio only while it generates with vLLM. The reference here is a
plain `GRPOTrainer` whose generation is TRL's public `rollout_func` returning fixed samples, with
`use_vllm` turned on by hand so that `_generate_and_score_completions` computes the old log-probs, the
ratio and the advantages as it does for vLLM's samples; its `compute_loss` then gives the loss and
gradients our learner must give on the same batch. The engines' log-probs are the same model's in
bfloat16, as a bf16 engine's would be, each sequence shifted by a set offset so that the correction's
bounds are crossed by construction, whatever the CPU's rounding."""

import copy

import numpy as np
import pytest
import torch

from orchestrator.config.train import TrainConfig
from orchestrator.rollout.samples import StepSamples
from orchestrator.training.batch import learner_batch
from workers.learner import importance_sampling, step_inputs
from workers.learner.grpo import GRPOLearner

GROUPS, SIZE = 3, 4
pytestmark = pytest.mark.filterwarnings("ignore:You are using 'rollout_func'")


# Per-sequence shifts of the engine's log-probs, cycled over the samples. A shift c makes each token's
# ratio about exp(-c) and the sequence's about exp(-c * length): -0.3 and +0.3 give 1.35 and 0.74 per
# token, beyond both TIGHT bounds, while 0 leaves the bf16 rounding alone (ratios within a few percent
# of 1, inside the bounds), so every mode sees ratios on both sides of its bounds and within them.
SHIFTS = (-0.3, 0.0, 0.3, 0.0)


def _first_update(learner, batch, micro_batch_size=None, max_tokens=None) -> dict:
    """What train_step does up to its first optimizer step: the round prepared, the gradient of its one
    part's loss accumulated in `.grad`; its metrics."""
    (part,), _ = learner.prepare_round(batch, micro_batch_size, max_tokens)
    return learner.accumulate_gradients(part)


def _samples(learner, tiny, seed=0, shifts=(0.0,)):
    """Prompt and completion ids of different lengths, and their log-probs under the learner's model run
    in bfloat16 (the engines' dtype on a GPU), each sequence's shifted by the next of `shifts`."""
    rng = np.random.default_rng(seed)
    vocab = len(learner.tokenizer)
    prompts = [rng.integers(3, vocab, size=rng.integers(2, 7)).tolist() for _ in range(GROUPS)]
    prompt_ids = [prompt for prompt in prompts for _ in range(SIZE)]
    completion_ids = [rng.integers(3, vocab, size=rng.integers(2, 13)).tolist() for _ in prompt_ids]
    from transformers import AutoModelForCausalLM

    half = AutoModelForCausalLM.from_pretrained(tiny.model_dir, dtype=torch.bfloat16)
    logprobs = []
    for prompt, completion in zip(prompt_ids, completion_ids):
        with torch.no_grad():
            logits = half(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1].float()
        logits = logits / learner.config.temperature
        shift = shifts[len(logprobs) % len(shifts)]
        logps = torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        logprobs.append((logps + shift).clamp(max=0.0).tolist())  # still log-probabilities
    return prompt_ids, completion_ids, logprobs


def _trl_reference(learner, tiny, samples, rewards):
    """TRL's inputs to its loss for these samples, computed by TRL's own generation step."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOTrainer

    prompt_ids, completion_ids, logprobs = samples

    def rollout(prompts, trainer):
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    def reward(prompts, completions, completion_ids, **kwargs):
        return list(rewards)

    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny.model_dir),
        reward_funcs=reward,
        args=copy.deepcopy(learner.trainer.args),
        train_dataset=Dataset.from_dict({"prompt": ["unused"]}),
        processing_class=learner.tokenizer,
        rollout_func=rollout,
    )
    trainer.use_vllm = True  # what TRL does for vLLM's samples, without a vLLM client
    trainer._last_loaded_step = trainer.state.global_step
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    inputs = trainer._generate_and_score_completions([{"prompt": "unused"}] * len(prompt_ids))
    return trainer, inputs


def _our_batch(learner, samples, advantages):
    prompt_ids, completion_ids, logprobs = samples
    return learner_batch(
        StepSamples.from_tokens(prompt_ids, completion_ids, logprobs), advantages, learner.tokenizer.pad_token_id
    )


def _gradients(model):
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def _trl_updates(trainer, batches: list[dict], config) -> tuple[list[float], list[float]]:
    """TRL's training_step on each batch in turn (loss, backward, clipping, optimizer and scheduler
    steps); each update's loss and clipped share."""
    losses, clipped = [], []
    for batch in batches:
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), config.max_grad_norm)
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        clipped.append(trainer._metrics["train"]["clip_ratio/region_mean"][-1])
    return losses, clipped


# Bounds the SHIFTS cross, so every mode clips or masks some ratios.
TIGHT = {"vllm_importance_sampling_clip_min": 0.9, "vllm_importance_sampling_clip_max": 1.05}


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", importance_sampling.MODES)
def test_loss_and_gradients_equal_trls_for_every_correction(tiny, mode, level):
    settings = {"vllm_importance_sampling_mode": mode, "importance_sampling_level": level, **TIGHT}
    loss_type = "grpo" if level == "sequence" else "dapo"  # GSPO is grpo's loss at the sequence level
    config = TrainConfig(num_generations=SIZE, prompts_per_step=GROUPS, max_steps=1, loss_type=loss_type, **settings)
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    samples = _samples(learner, tiny, shifts=SHIFTS)
    rewards = np.random.default_rng(1).random(GROUPS * SIZE)
    trainer, inputs = _trl_reference(learner, tiny, samples, rewards)
    weights = inputs["importance_sampling_ratio"]
    if mode.endswith("mask"):  # some ratios masked, some kept
        assert (weights == 0).any() and (weights > 0).any()
    else:  # some ratios raised to the lower bound, some cut to the upper
        assert (weights == TIGHT["vllm_importance_sampling_clip_min"]).any()
        assert (weights == TIGHT["vllm_importance_sampling_clip_max"]).any()
    trl_loss = trainer.compute_loss(trainer.model, inputs)
    trl_loss.backward()
    trl_grads = _gradients(trainer.model)

    # Ours, the whole step padded as TRL lays it out
    batch = _our_batch(learner, samples, inputs["advantages"].cpu().numpy())
    learner.packed = False
    metrics = _first_update(learner, batch)
    ours = _gradients(learner.model)
    assert metrics["loss"] == pytest.approx(float(trl_loss.detach()), abs=1e-5)
    assert ours.keys() == trl_grads.keys()
    assert max(float((ours[name] - trl_grads[name]).abs().max()) for name in ours) <= 1e-5
    # and packed, in micro-batches of a few samples: each one's ratio comes from its own loss pass
    learner.packed = True
    split = _first_update(learner, batch, None, 40)
    ours = _gradients(learner.model)
    assert split["learner/micro_batches"] > 2
    assert split["loss"] == pytest.approx(float(trl_loss.detach()), abs=1e-5)
    largest = max(float(grad.abs().max()) for grad in trl_grads.values())
    assert max(float((ours[name] - trl_grads[name]).abs().max()) for name in ours) <= 1e-5 * max(1.0, largest)
    # TRL's figures of the same ratio
    real = inputs["completion_mask"].bool()
    flat = weights.flatten() if mode.startswith("sequence") else weights[real]
    for name, value in (("mean", flat.mean()), ("min", flat.min()), ("max", flat.max())):
        assert metrics[f"sampling/importance_sampling_ratio/{name}"] == pytest.approx(float(value), abs=1e-5)
    delta = (inputs["old_per_token_logps"] - inputs["sampling_per_token_logps"]).abs()[real]
    assert metrics["sampling/sampling_logp_difference/mean"] == pytest.approx(float(delta.mean()), abs=1e-5)
    assert metrics["sampling/sampling_logp_difference/max"] == pytest.approx(float(delta.max()), abs=1e-5)


def test_off_policy_mask_and_no_correction_equal_trls(tiny):
    for settings in ({"off_policy_mask_threshold": 0.001}, {"vllm_importance_sampling_correction": False}):
        config = TrainConfig(num_generations=SIZE, prompts_per_step=GROUPS, max_steps=1, **settings)
        learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
        samples = _samples(learner, tiny, seed=2)
        trainer, inputs = _trl_reference(learner, tiny, samples, np.random.default_rng(3).random(GROUPS * SIZE))
        assert ("old_per_token_logps" in inputs) == learner.corrected  # uncorrected: the loss's own pass (TRL)
        trl_loss = trainer.compute_loss(trainer.model, inputs)
        trl_loss.backward()
        trl_grads = _gradients(trainer.model)
        learner.packed = False  # TRL's layout
        metrics = _first_update(learner, _our_batch(learner, samples, inputs["advantages"].cpu().numpy()))
        ours = _gradients(learner.model)
        assert metrics["loss"] == pytest.approx(float(trl_loss.detach()), abs=1e-5)
        assert max(float((ours[name] - trl_grads[name]).abs().max()) for name in ours) <= 1e-5
        assert ("sampling/importance_sampling_ratio/mean" in metrics) == learner.corrected


@pytest.mark.parametrize("beta", [0.0, 0.1])
def test_two_updates_per_step_follow_trls_num_iterations(tiny, beta):
    """num_iterations 2: both updates clip against the log-probs from before the first (TRL's mu), and
    with a KL term both use the reference log-probs computed once."""
    config = TrainConfig(
        num_generations=SIZE,
        prompts_per_step=GROUPS,
        max_steps=1,
        num_iterations=2,
        learning_rate=3e-2,
        epsilon=0.05,
        beta=beta,
    )
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    before = {name: tensor.clone() for name, tensor in learner.named_weights()}
    samples = _samples(learner, tiny, seed=4)
    trainer, inputs = _trl_reference(learner, tiny, samples, np.random.default_rng(5).random(GROUPS * SIZE))
    trainer.create_optimizer_and_scheduler(num_training_steps=2)
    losses, clipped = _trl_updates(trainer, [inputs, inputs], config)  # the same generation batch, twice
    assert clipped[0] == 0.0 and clipped[1] > 0.0  # the second update moved away from the old policy

    learner.packed = False  # TRL's layout
    metrics = learner.train_step(_our_batch(learner, samples, inputs["advantages"].cpu().numpy()))
    assert metrics["loss"] == pytest.approx(np.mean(losses), abs=1e-5)
    assert metrics["clip_ratio/region_mean"] == pytest.approx(np.mean(clipped), abs=1e-6)
    assert learner.policy_version == 1  # one round: the engines get the weights after both updates
    _assert_same_weights(learner, trainer, before)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_the_parts_of_a_round_follow_trls_steps_per_generation(tiny, loss_type):
    """steps_per_generation 2: the round's samples shuffled into two parts and an update on each, both
    clipping against the log-probs from before the first; dapo divides by the round's tokens over
    steps_per_generation, as TRL's loss does."""
    config = TrainConfig(
        num_generations=SIZE,
        prompts_per_step=GROUPS,
        max_steps=1,
        steps_per_generation=2,
        learning_rate=3e-2,
        epsilon=0.05,
        loss_type=loss_type,
    )
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    before = {name: tensor.clone() for name, tensor in learner.named_weights()}
    samples = _samples(learner, tiny, seed=6)
    trainer, inputs = _trl_reference(learner, tiny, samples, np.random.default_rng(7).random(GROUPS * SIZE))
    trainer.create_optimizer_and_scheduler(num_training_steps=2)
    rows = {"completion_mask": np.arange(GROUPS * SIZE)}
    parts = [part["completion_mask"] for part in step_inputs.round_parts(rows, 2, learner.round_seed())]
    assert sorted(np.concatenate(parts).tolist()) == list(range(GROUPS * SIZE)) and len(parts[0]) == len(parts[1])
    assert not all(np.diff(np.concatenate(parts)) > 0), "the round was not shuffled"
    index = [torch.as_tensor(members) for members in parts]  # each part of TRL's buffered generation batch
    batches = [
        {key: value[rows] if torch.is_tensor(value) and value.ndim else value for key, value in inputs.items()} for rows in index
    ]
    losses, clipped = _trl_updates(trainer, batches, config)
    assert clipped[1] > 0.0  # the second part's update clipped against the policy before the first

    learner.packed = False  # TRL's layout
    metrics = learner.train_step(_our_batch(learner, samples, inputs["advantages"].cpu().numpy()))
    assert metrics["loss"] == pytest.approx(np.mean(losses), abs=1e-5)
    assert metrics["clip_ratio/region_mean"] == pytest.approx(np.mean(clipped), abs=1e-6)
    assert learner.policy_version == 1 and learner.updates == 2
    _assert_same_weights(learner, trainer, before)


@pytest.mark.parametrize(
    ("settings", "runs"),
    [({}, False), ({"num_iterations": 2}, True), ({"steps_per_generation": 2}, True), ({"max_staleness": 1}, False)],
)
def test_the_old_log_probs_pass_runs_only_when_an_update_follows_another(tiny, settings, runs):
    """With one update per round its forward pass gives the old log-probs, so the extra no-grad pass is
    skipped (no `time/old_logps`, `old-lp pass skipped` on the step line); with a second update (another
    iteration or another part) it runs. Async rows (stale ones) do not change that."""
    config = TrainConfig(num_generations=SIZE, prompts_per_step=GROUPS, max_steps=1, **settings)
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    calls = []
    learner._old_policy = lambda step, run=learner._old_policy: calls.append(run(step))
    samples = _samples(learner, tiny, seed=8, shifts=SHIFTS)
    metrics = learner.train_step(_our_batch(learner, samples, np.random.default_rng(9).normal(size=GROUPS * SIZE)))
    assert ("time/old_logps" in metrics) is runs
    assert bool(calls) is runs


@pytest.mark.parametrize("mode", ["sequence_mask", "token_truncate"])
def test_skipping_the_old_log_probs_pass_leaves_the_update_as_it_was(tiny, mode):
    """The skipped pass changes nothing the loss uses: one learner skips it (the default), one runs it
    first; same loss, engine-correction figures and weights after the step, with corrections that bite."""
    config = TrainConfig(
        num_generations=SIZE,
        prompts_per_step=GROUPS,
        max_steps=1,
        learning_rate=3e-2,
        vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_clip_min=0.9,
        vllm_importance_sampling_clip_max=1.05,
    )
    results = []
    for forced in (False, True):
        learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
        learner.packed = False
        if forced:
            learner.needs_old_policy_pass = lambda parts: True
        samples = _samples(learner, tiny, seed=10, shifts=SHIFTS)
        batch = _our_batch(learner, samples, np.random.default_rng(11).normal(size=GROUPS * SIZE))
        results.append((learner.train_step(batch), dict(learner.named_weights())))
    (skipped, skipped_weights), (passed, passed_weights) = results
    assert "time/old_logps" not in skipped and "time/old_logps" in passed
    assert skipped["loss"] == pytest.approx(passed["loss"], abs=1e-6)
    for figure in ("sampling/importance_sampling_ratio/mean", "sampling/importance_sampling_ratio/min"):
        assert skipped[figure] == pytest.approx(passed[figure], rel=1e-6)
    if mode.endswith("truncate"):  # ratios above the bound were cut to it
        assert skipped["sampling/importance_sampling_ratio/max"] == pytest.approx(1.05)
    else:  # and sequences outside the bounds weighted 0
        assert skipped["sampling/importance_sampling_ratio/min"] == 0.0
    assert max(float((skipped_weights[name] - passed_weights[name]).abs().max()) for name in skipped_weights) <= 1e-6


def _assert_same_weights(learner, trainer, before) -> None:
    """Our weights after the round are TRL's. On the CPU to 1e-4. On a GPU, float32 matrix products
    of other shapes (our micro-batches, TRL's whole part) sum in other orders, a token at the clip
    boundary can then fall on either side of it, and Adam turns gradients that differ near zero into
    steps that differ by a part of the learning rate: there the two updates agree to a tenth of their
    size (2.5e-3 of 6e-2 seen on an H200)."""
    ours, theirs = dict(learner.named_weights()), trainer.model.state_dict()
    gap = max(float((ours[name] - theirs[name].to(ours[name].device)).abs().max()) for name in ours)
    if learner.device.type == "cpu":
        assert gap <= 1e-4
    else:
        moved = max(float((ours[name] - before[name]).abs().max()) for name in ours)
        assert gap <= 0.1 * moved, (gap, moved)
