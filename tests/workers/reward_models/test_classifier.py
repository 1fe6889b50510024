"""A reward model's scores are the ones TRL's GRPOTrainer computes for the same samples (its own reward
path, `_calculate_rewards`), for plain-text and conversational prompts, whatever the batching."""

import shutil

import numpy as np
import pytest
import torch

from orchestrator.builtin.tiny_reward_model import expected_reward, short_preferring_reward_model
from workers.reward_models.classifier import SequenceClassifier

PROMPTS = ["Q: what is apple ? A:", "Q: what is pear ? A:", "Q: what is plum ? A:"]
COMPLETIONS = [" <search> apple </search>", " apple", " the plum is a plum and a plum is a fruit"]
TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"


@pytest.fixture(scope="module")
def reward_model(tmp_path_factory):
    """The short-preferring reward model, with a chat template for conversations."""
    folder = tmp_path_factory.mktemp("rm") / "model"
    shutil.copytree(short_preferring_reward_model(), folder)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(folder)
    return str(folder)


def trl_rewards(tiny, reward_model: str, prompts: list, completions: list) -> np.ndarray:
    """What TRL's GRPOTrainer scores these samples with, reward_funcs=[reward_model] as a TRL user names it."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    # bf16 off: with it (TRL's default on a GPU) TRL scores under bf16 autocast, the worker in the checkpoint's dtype
    cpu = not torch.cuda.is_available()
    args = GRPOConfig(
        output_dir="unused", per_device_train_batch_size=3, num_generations=3, report_to=[], use_cpu=cpu, bf16=False
    )
    trainer = GRPOTrainer(
        model=str(tiny.model_dir),
        reward_funcs=[reward_model],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["unused"]}),
    )
    inputs = [{"prompt": p, "completion": c} for p, c in zip(prompts, completions)]
    rewards = trainer._calculate_rewards(inputs, prompts, completions, [[0]] * len(prompts))
    return rewards[:, 0].cpu().numpy()


@pytest.mark.parametrize("conversational", [False, True])
def test_scores_equal_trls_own_reward_path(tiny, reward_model, conversational):
    prompts, completions = PROMPTS, COMPLETIONS
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in PROMPTS]
        completions = [[{"role": "assistant", "content": c}] for c in COMPLETIONS]
    theirs = trl_rewards(tiny, reward_model, prompts, completions)
    ours = np.array(SequenceClassifier(reward_model).score(prompts, completions))
    assert np.abs(ours - theirs).max() <= 1e-5, (ours, theirs)
    assert len(set(np.round(ours, 4))) == len(ours)  # samples of other lengths score apart: not a constant


def test_batches_under_the_token_budget_score_as_one(reward_model):
    whole = SequenceClassifier(reward_model)
    one_at_a_time = SequenceClassifier(reward_model, max_batch_tokens=1)
    assert one_at_a_time._batches([3, 1, 2]) == [[1], [2], [0]]
    assert whole._batches([3, 1, 2]) == [[1, 2, 0]]
    scores = whole.score(PROMPTS, COMPLETIONS)
    assert one_at_a_time.score(PROMPTS, COMPLETIONS) == pytest.approx(scores, abs=1e-6)
    lengths = [len(whole.tokenizer(p + c)["input_ids"]) for p, c in zip(PROMPTS, COMPLETIONS)]
    assert scores == pytest.approx([expected_reward(n - 1) for n in lengths], abs=1e-4)  # the model as built
    assert scores[1] > scores[0] > scores[2]  # shorter scores higher


def test_a_tokenizer_without_pad_pads_with_eos_and_tells_the_model(reward_model):
    classifier = SequenceClassifier(reward_model)
    assert classifier.tokenizer.pad_token_id == classifier.tokenizer.eos_token_id
    assert classifier.model.config.pad_token_id == classifier.tokenizer.eos_token_id
    assert classifier.device == torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_a_completion_spelling_the_models_eos_is_read_as_plain_text(reward_model):
    """The reward model reads the policy's text: a completion cannot end the sequence early by writing the
    EOS token's characters (here an EOS it would read, then text it would ignore after the pad)."""
    classifier = SequenceClassifier(reward_model)
    eos = classifier.tokenizer.eos_token
    [text] = classifier.texts(["Q: a ? A:"], [f" apple{eos}"])
    assert classifier.tokenizer.eos_token_id not in classifier.tokenizer(text, add_special_tokens=False)["input_ids"]
