"""The learner's GRPO step through TRL, on the tiny model, without Ray."""

import numpy as np
import pytest
import torch

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError
from orchestrator.rollout.samples import StepSamples
from orchestrator.training.advantages import group_advantages
from orchestrator.training.batch import learner_batch
from workers.learner.grpo import GRPOLearner


def _first_update(learner, batch, micro_batch_size=None, max_tokens=None) -> dict:
    """What train_step does up to its first optimizer step: the round prepared, the gradient of its one
    part's loss accumulated in `.grad`; its metrics."""
    (part,), _ = learner.prepare_round(batch, micro_batch_size, max_tokens)
    return learner.accumulate_gradients(part)


@pytest.fixture(scope="module")
def learner(tiny):
    config = TrainConfig(num_generations=2, prompts_per_step=2, learning_rate=1e-2, temperature=1.5, max_steps=5)
    return GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))


def _batch(learner, temperature=1.5):
    """Two groups of two samples, with behaviour logprobs computed from the learner's own model."""
    tok = learner.tokenizer
    prompt = tok("Q: what is apple ? A:")["input_ids"]
    completions = [tok(" <search> apple </search>")["input_ids"] + [tok.eos_token_id], tok(" apple")["input_ids"]]
    rows = {"prompt_ids": [prompt] * 4, "completion_ids": completions * 2, "logprobs": []}
    model = learner.trainer.accelerator.unwrap_model(learner.model)
    for completion in rows["completion_ids"]:
        ids = torch.tensor([prompt + completion], device=learner.device)
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : -1] / temperature
        chosen = torch.tensor(completion, device=learner.device)[:, None]
        rows["logprobs"].append(torch.log_softmax(logits, -1).gather(-1, chosen)[:, 0].tolist())
    samples = StepSamples.from_tokens(rows["prompt_ids"], rows["completion_ids"], rows["logprobs"])
    advantages = group_advantages(np.array([1.0, 0.0, 1.0, 0.0]), np.array([0, 0, 1, 1]))
    return learner_batch(samples, advantages, tok.pad_token_id)


def test_step_uses_trl_loss_and_matches_behaviour_logprobs(learner):
    before = {k: v.clone() for k, v in learner.named_weights()}
    metrics = learner.train_step(_batch(learner))
    assert metrics["sampling/sampling_logp_difference/mean"] < 1e-4  # same weights, temperature applied on both sides
    assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
    assert learner.policy_version == 1
    after = dict(learner.named_weights())
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_observation_tokens_are_left_out_of_the_logprob_check(learner):
    batch = _batch(learner)
    batch["sampling_per_token_logps"][0, 1:3] = -50.0  # tokens 1-2 of row 0 played the part of a tool's result
    batch["tool_mask"] = np.ones_like(batch["completion_mask"])
    batch["tool_mask"][0, 1:3] = 0
    assert learner.train_step(batch)["sampling/sampling_logp_difference/mean"] < 1e-4


def test_rewarded_completion_becomes_more_likely(learner):
    def call_logp():  # summed logprob of the rewarded completion (row 0) under the current weights
        batch = _batch(learner)
        return float((batch["sampling_per_token_logps"][0] * batch["completion_mask"][0]).sum())

    start = call_logp()
    for _ in range(3):
        learner.train_step(_batch(learner))
    assert call_logp() > start


def test_weight_buckets_cover_every_weight(learner):
    from workers.weights.buckets import pack, tensors

    buckets = pack(learner.named_weights(), bucket_bytes=64 << 10)  # what the learner actor publishes
    assert len(buckets) > 1 and max(bucket.nbytes for bucket in buckets) <= 64 << 10
    received = list(tensors(buckets))  # what an engine loads: the split embedding joined again
    assert [name for name, _ in received] == [name for name, _ in learner.named_weights()]
    for (name, sent), (_, weight) in zip(received, learner.named_weights()):
        assert torch.equal(sent, weight.cpu()), name  # buckets live in host memory


def test_kl_term_against_the_reference_model(tiny):
    config = TrainConfig(num_generations=2, prompts_per_step=2, learning_rate=1e-2, temperature=1.5, max_steps=3, beta=0.1)
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    first = learner.train_step(_batch(learner))
    assert first["sampling/sampling_logp_difference/mean"] < 1e-4 and np.isfinite(first["loss"])
    second = learner.train_step(_batch(learner))
    assert np.isfinite(second["loss"])


def _uneven_batch(learner, rows=10, seed=0):
    """`rows` samples of different prompt and completion lengths (groups of two), with behaviour
    logprobs a little off the learner's own so the importance ratio is clipped on some tokens."""
    rng = np.random.default_rng(seed)
    vocab = len(learner.tokenizer)
    prompts = [rng.integers(3, vocab, size=rng.integers(2, 7)).tolist() for _ in range(rows)]
    completions = [rng.integers(3, vocab, size=rng.integers(1, 13)).tolist() for _ in range(rows)]
    samples = StepSamples.from_tokens(prompts, completions, [[0.0] * len(c) for c in completions])
    advantages = group_advantages(rng.random(rows), np.arange(rows) // 2)
    batch = learner_batch(samples, advantages, learner.tokenizer.pad_token_id)
    inputs = {key: torch.tensor(value, device=learner.device) for key, value in batch.items()}
    with torch.no_grad():
        logps = learner._logps(learner.model, inputs).cpu().numpy()
    noise = rng.normal(scale=0.3, size=logps.shape).astype(np.float32)
    batch["sampling_per_token_logps"] = (logps + noise) * batch["completion_mask"]
    return batch


def _gradients(learner, batch, micro_batch_size=None, max_tokens=None, packed=False, one_row=False):
    learner.packed, learner._one_row = packed, one_row
    metrics = _first_update(learner, batch, micro_batch_size, max_tokens)
    grads = {name: p.grad.clone() for name, p in learner.model.named_parameters() if p.grad is not None}
    learner.optimizer.zero_grad(set_to_none=True)
    return metrics, grads


# Splits of the 10 uneven samples, each against the unsplit padded step: 4, 4 and 2 samples; micro-batches
# of at most 40 token slots, padded or packed; and one packed pass of the whole step, in rows as long as
# its longest sample (sdpa's layout) or in one row (flash-attention's).
SPLITS = {
    "4 samples": {"micro_batch_size": 4},
    "40 padded tokens": {"max_tokens": 40},
    "40 packed tokens": {"max_tokens": 40, "packed": True},
    "packed whole step": {"packed": True},
    "packed whole step, one row": {"packed": True, "one_row": True},
}


@pytest.mark.parametrize("how", SPLITS)
@pytest.mark.parametrize(
    "loss_type,beta,tools",
    [
        ("dapo", 0.0, False),
        ("grpo", 0.0, False),
        ("bnpo", 0.0, False),
        ("dr_grpo", 0.0, False),
        ("cispo", 0.0, False),
        ("sapo", 0.0, False),
        ("dapo", 0.1, False),
        ("grpo", 0.1, True),
        ("luspo", 0.0, False),
        ("vespo", 0.0, False),
    ],
)
def test_micro_batches_give_the_gradient_and_loss_of_the_whole_step(tiny, loss_type, beta, tools, how):
    # luspo as TRL recommends it (sequence level); vespo weighs sequences itself, on per-token corrections
    settings = {"luspo": {"importance_sampling_level": "sequence"}, "vespo": {"vllm_importance_sampling_mode": "token_mask"}}
    config = TrainConfig(
        num_generations=2, prompts_per_step=5, max_steps=1, loss_type=loss_type, beta=beta, **settings.get(loss_type, {})
    )
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    assert learner.packed  # the tiny Llama packs (sdpa), and agreed with itself at start
    batch = _uneven_batch(learner)
    if tools:  # a tool's result in two rows: context, not trained on
        batch["tool_mask"] = np.ones_like(batch["completion_mask"])
        batch["tool_mask"][[1, 6], 1:3] = 0
    whole, whole_grads = _gradients(learner, batch)
    split, split_grads = _gradients(learner, batch, **SPLITS[how])
    assert whole["learner/micro_batches"] == 1
    if how in ("4 samples", "packed whole step", "packed whole step, one row"):
        assert split["learner/micro_batches"] == {"4 samples": 3}.get(how, 1)
    else:  # 40 token slots hold a few of these samples, not all
        assert split["learner/micro_batches"] > 2
    assert whole_grads.keys() == split_grads.keys() and whole_grads
    worst = max(float((whole_grads[name] - split_grads[name]).abs().max()) for name in whole_grads)
    largest = max(float(whole_grads[name].abs().max()) for name in whole_grads)
    assert worst <= 1e-5 * max(1.0, largest)  # the sequence ratios (up to 3) scale float32's rounding
    # The loss is a mean of per-token terms ratio * advantage, each of about the largest |advantage| in
    # size, that cancel within each group to a result hundreds of times smaller: the padded and packed
    # layouts round each token's log-prob differently (float32, about 1e-7 of the logits) and add the terms
    # in other orders, so the two losses differ by a small multiple of float32's epsilon times the terms'
    # size (times the square root of the ~100 tokens), not of the small result. 1e-5 of the terms' size
    # is about eight times that.
    terms = float(np.abs(batch["advantages"]).max())
    # luspo's loss is each sequence's ratio (the exponential of a sum over its tokens) times its length:
    # the layouts' float32 rounding grows with the length squared.
    rel = 1e-3 if loss_type == "luspo" else 1e-4
    assert split["loss"] == pytest.approx(whole["loss"], rel=rel, abs=1e-5 * terms) and whole["loss"] != 0.0
    # On a GPU, float32 matrix products of other shapes take other kernels, which sum in other orders:
    # the layouts' log-probs (about -6 here) then differ by a few 1e-7 of their size (2e-6 seen on an H200).
    close = 1e-6 if learner.device.type == "cpu" else 1e-5
    for key in ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max"):
        assert split[key] == pytest.approx(whole[key], abs=close), key


def test_packed_micro_batches_compute_little_or_no_padding(tiny):
    config = TrainConfig(num_generations=2, prompts_per_step=5, max_steps=1, learner={"max_tokens_per_micro_batch": 40})
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    batch = _uneven_batch(learner)
    whole, _ = _gradients(learner, batch)
    padded, _ = _gradients(learner, batch, max_tokens=40)  # by length: samples of like length together
    packed, _ = _gradients(learner, batch, max_tokens=40, packed=True)
    one_row, _ = _gradients(learner, batch, max_tokens=40, packed=True, one_row=True)
    assert whole["learner/pad_fraction"] > 0.25
    assert whole["learner/pad_fraction"] > padded["learner/pad_fraction"] > packed["learner/pad_fraction"]
    assert one_row["learner/pad_fraction"] == 0.0
    tokens = int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
    assert one_row["learner/micro_batches"] == -(-tokens // 40)  # first-fit fills every micro-batch but the last
    assert one_row["learner/micro_batches"] <= packed["learner/micro_batches"] < padded["learner/micro_batches"]


def test_a_model_that_cannot_pack_is_trained_padded_or_refused(tiny):
    config = TrainConfig(num_generations=2, prompts_per_step=2, max_steps=1)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny.model_dir, attn_implementation="eager")
    model.config._attn_implementation = "paged|eager"  # an attention that transformers does not pack
    assert not GRPOLearner(config, model, str(tiny.tokenizer_dir)).packed
    strict = TrainConfig(num_generations=2, prompts_per_step=2, max_steps=1, learner={"padding_free": True})
    with pytest.raises(UserError, match=r"learner.padding_free is true.*'paged\|eager'"):
        GRPOLearner(strict, model, str(tiny.tokenizer_dir))


def test_micro_batch_size_from_the_config_drives_the_step(tiny):
    config = TrainConfig(num_generations=2, prompts_per_step=5, max_steps=2, learner={"micro_batch_size": 3})
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    metrics = learner.train_step(_uneven_batch(learner))
    assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0 and learner.policy_version == 1


def test_log_probs_over_a_152k_vocabulary_equal_those_of_the_whole_logits(tmp_path):
    """TRL's fused head scores the vocabulary in chunks (five of them here); packed or padded, the
    learner's log-probs equal those of the model's whole logits (within 1e-6 of their size)."""
    from transformers import AutoModelForCausalLM

    from orchestrator.bench.model import QWEN_VOCAB, wide_vocab_model

    folder = wide_vocab_model(hidden=32)
    config = TrainConfig(num_generations=2, prompts_per_step=5, max_steps=1, temperature=0.7)
    learner = GRPOLearner(config, str(folder), str(folder))
    assert learner.packed
    batch = {key: torch.tensor(value) for key, value in _uneven_batch(learner).items()}
    batch["completion_ids"] = torch.randint(QWEN_VOCAB - 1000, QWEN_VOCAB, batch["completion_ids"].shape)  # past the first chunks
    plain = AutoModelForCausalLM.from_pretrained(folder)
    full = []
    for row in range(batch["prompt_ids"].size(0)):
        prompt = batch["prompt_ids"][row][batch["prompt_mask"][row].bool()]
        completion = batch["completion_ids"][row][batch["completion_mask"][row].bool()]
        with torch.no_grad():
            logits = plain(torch.cat([prompt, completion])[None]).logits[0, len(prompt) - 1 : -1] / 0.7
        row_logps = torch.log_softmax(logits, -1).gather(-1, completion[:, None])[:, 0]
        full.append(torch.nn.functional.pad(row_logps, (0, batch["completion_ids"].size(1) - len(completion))))
    full = torch.stack(full)
    for packed in (True, False):
        learner.packed = packed
        with torch.no_grad():
            chunked = learner._logps(learner.model, {key: value.to(learner.device) for key, value in batch.items()}).cpu()
        # Log-probs near -12 here, where one float32 step is 9.5e-7: equal to a few steps.
        assert float(((chunked - full).abs() / full.abs().clamp(min=1.0)).max()) <= 1e-6, packed


def test_a_masked_truncated_completion_adds_nothing_to_the_step(tiny):
    """mask_truncated_completions (loss_rows 0): with the token-level loss the step's gradient is that of
    the batch without the row."""
    config = TrainConfig(num_generations=2, prompts_per_step=5, max_steps=1, loss_type="dapo")
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    batch = _uneven_batch(learner)
    masked = {**batch, "loss_rows": np.array([1, 1, 0, 1, 1, 1, 1, 1, 1, 1])}
    without = {key: np.delete(value, 2, axis=0) for key, value in batch.items()}
    with_row, masked_grads = _gradients(learner, masked, packed=True)
    alone, without_grads = _gradients(learner, without, packed=True)
    assert max(float((masked_grads[name] - without_grads[name]).abs().max()) for name in masked_grads) <= 1e-5
    assert with_row["loss"] == pytest.approx(alone["loss"], abs=1e-6)


def test_stale_samples_are_clipped_against_the_engines_log_probs(tiny):
    """Async mode: a sample of an older policy has the engines' log-probs as its old ones (PPO's clip
    against the policy that drew it) and no engine correction; a current one keeps the learner's own."""
    config = TrainConfig(num_generations=2, prompts_per_step=5, max_steps=1)
    learner = GRPOLearner(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    batch = _uneven_batch(learner)
    stale = np.array([1, 1, 0, 0, 1, 1, 0, 0, 1, 1])
    marked, marked_grads = _gradients(learner, {**batch, "stale_rows": stale}, max_tokens=40, packed=True)
    # The same step spelled out: old log-probs given (the engines' where stale), ratio 1 where stale.
    rows = len(stale)
    with torch.no_grad():
        inputs = {key: torch.tensor(value, device=learner.device) for key, value in batch.items()}
        own = learner._logps(learner.model, inputs).cpu().numpy()
    from workers.learner import importance_sampling

    ratio = importance_sampling.ratio(
        torch.tensor(own),
        torch.tensor(batch["sampling_per_token_logps"]),
        torch.tensor(batch["completion_mask"]),
        "sequence_mask",
        None,
        3.0,
    ).numpy()
    spelled = {
        **batch,
        "old_per_token_logps": np.where(stale[:, None] == 1, batch["sampling_per_token_logps"], own),
        "importance_sampling_ratio": np.where(stale[:, None] == 1, 1.0, ratio).astype(np.float32).reshape(rows, 1),
    }
    _, spelled_grads = _gradients(learner, spelled, max_tokens=40, packed=True)
    largest = max(float(grad.abs().max()) for grad in spelled_grads.values())
    assert max(float((marked_grads[n] - spelled_grads[n]).abs().max()) for n in marked_grads) <= 1e-5 * max(1.0, largest)
    assert marked["sampling/importance_sampling_ratio/min"] < 1.0  # the current rows are still corrected
