"""`python -m orchestrator train` end to end (real Ray, vLLM, TRL), against TRL's own GRPOTrainer.

The seed-trap set-up: the model folder carries the base tokenizer, the learner tokenizer has
<search> and no pad token, and the reward comes from a user file.
"""

import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.engines

STEPS, PROMPTS, GENERATIONS = 20, 4, 4
REWARD = """
import re

BEGIN, END = {begin}, {end}  # token ids of <search> and </search>


def exact_call(prompts, completions, completion_ids, **kwargs):
    \"\"\"0.5 for exactly one <search> ... </search> call (by token id), +0.5 if it holds exactly the
    prompt's topic. Works whether or not the trainer strips special tokens from the text (TRL does).\"\"\"
    out = []
    for prompt, completion, ids in zip(prompts, completions, completion_ids):
        topic = re.search(r"(?:about|is|on) (\\w+) [.?] A:$", prompt).group(1)
        words = completion.replace("<search>", " ").replace("</search>", " ").split()
        one_call = list(ids).count(BEGIN) == 1 and list(ids).count(END) == 1
        out.append(0.5 * one_call + 0.5 * (one_call and words == [topic]))
    return out
"""
SETTINGS = dict(temperature=1.5, learning_rate=1e-3, max_completion_length=16, seed=0, loss_type="dapo")


@pytest.fixture(scope="module")
def reward_file(tmp_path_factory, learner_tokenizer):
    path = tmp_path_factory.mktemp("reward") / "my_reward.py"
    ids = learner_tokenizer.convert_tokens_to_ids(["<search>", "</search>"])
    path.write_text(REWARD.replace("{begin}", str(ids[0])).replace("{end}", str(ids[1])))
    return path


def _train(tiny, reward_file, out, seed: int, save_steps: int) -> subprocess.CompletedProcess:
    overrides = [
        f"model={tiny.model_dir}",
        f"tokenizer={tiny.tokenizer_dir}",
        f"reward_funcs=[{reward_file}:exact_call]",
        f"prompts_per_step={PROMPTS}",
        f"num_generations={GENERATIONS}",
        f"max_steps={STEPS}",
        f"output_dir={out}",
        f"save_steps={save_steps}",
        *(f"{k}={v}" for k, v in {**SETTINGS, "seed": seed}.items()),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *overrides], capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def run(tiny, reward_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run"
    return out, _train(tiny, reward_file, out, SETTINGS["seed"], save_steps=10)


def test_run_completes_with_synced_weights_every_step(run):
    out, proc = run
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    assert [m["policy_version"] for m in metrics] == list(range(STEPS))
    assert max(m["sampling/sampling_logp_difference/mean"] for m in metrics) < 0.01
    for key in (
        "reward_mean",
        "reward_std",
        "samples",
        "completion_tokens",
        "ended/eos",
        "ended/stop",
        "ended/truncated",
        "completion_length/mean",
        "time/generate",
        "time/reward",
        "time/train",
        "time/sync",
        "time/step",
    ):
        assert key in metrics[0], key
    assert f"step   {STEPS}/{STEPS} | reward" in proc.stdout
    assert "tokenizer has no pad token; using EOS" in proc.stdout + proc.stderr


def test_rollouts_hold_every_sample_once(run):
    out, _ = run
    table = pq.read_table(out / "rollouts")
    assert table.num_rows == STEPS * PROMPTS * GENERATIONS
    keys = list(zip(*(table.column(c).to_pylist() for c in ("step", "group_id", "sample_index"))))
    assert len(set(keys)) == len(keys)
    assert {"reward", "advantage", "policy_version", "logprobs", "finish_reason", "stop_reason"} <= set(table.column_names)


def test_plots_and_checkpoints_load_with_the_canonical_tokenizer(run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, _ = run
    assert (out / "plots" / "reward.png").stat().st_size > 1000
    assert (out / "plots" / "timings.png").stat().st_size > 1000
    assert (out / "config.yaml").is_file()
    final = out / "checkpoints" / f"step-{STEPS:06d}"
    assert (out / "checkpoints" / "step-000010").is_dir()
    tokenizer = AutoTokenizer.from_pretrained(final)
    assert "<search>" in tokenizer.get_vocab()
    model = AutoModelForCausalLM.from_pretrained(final)
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)


def _load_reward(reward_file):
    import importlib.util

    spec = importlib.util.spec_from_file_location("user_reward", reward_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.exact_call


def _trl_final_model(tiny, reward_file, folder, seed):
    """TRL's GRPOTrainer alone (HF generate, no vLLM) on the same model, reward and settings, seeded."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from orchestrator.builtin import search_task

    args = GRPOConfig(
        output_dir=str(folder),
        per_device_train_batch_size=PROMPTS * GENERATIONS,
        num_generations=GENERATIONS,
        max_steps=STEPS,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        lr_scheduler_type="constant",
        **{**SETTINGS, "seed": seed},
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny.model_dir),
        reward_funcs=_load_reward(reward_file),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": search_task.all_prompts()}),
        processing_class=AutoTokenizer.from_pretrained(tiny.tokenizer_dir),
    )
    trainer.train()
    return trainer.model


def _expected_reward(model, tokenizer, reward, samples_per_prompt=16):
    """The policy's mean reward over every built-in prompt (96), sampled at the run's temperature: its
    standard error is under 0.01 (rewards in [0, 1], 1536 samples), where one training step's 16 samples
    give about 0.1. The same seed for every model, so their differences are less noisy still."""
    import torch

    from orchestrator.builtin import search_task

    torch.manual_seed(0)
    model.eval()  # HF generate in train mode samples differently (TRL hands its model back in train mode)
    prompts = search_task.all_prompts()
    eos = tokenizer.eos_token_id
    scores = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        out = model.generate(
            ids,
            do_sample=True,
            temperature=SETTINGS["temperature"],
            max_new_tokens=SETTINGS["max_completion_length"],
            num_return_sequences=samples_per_prompt,
            pad_token_id=eos,
            top_k=0,
        )[:, ids.shape[1] :].tolist()
        completions_ids = [c[: c.index(eos) + 1] if eos in c else c for c in out]
        texts = [tokenizer.decode([t for t in c if t != eos], skip_special_tokens=False) for c in completions_ids]
        scores += reward([prompt] * len(texts), texts, completions_ids)
    return float(np.mean(scores))


# What the comparison rests on. On an AMD EPYC (Zen 4) with these settings and the expected reward below:
# the initial model 0.270; our run with seeds 0, 1, 2: 0.433, 0.400, 0.423; TRL's with seeds 0-4: 0.473,
# 0.487, 0.460, 0.433, 0.502. On AVX2-only EPYCs (Zen 1, family 23 model 1; Zen 3 the same): the initial
# model 0.283; ours with seeds 0, 1, 2: 0.264, 0.488, 0.420 (seed 0 dips to ~0.1 reward around steps 8-11,
# its completions growing to ~12 tokens, and only partly recovers); TRL's with seeds 0, 1, 2: 0.421, 0.464,
# 0.467. On an Intel Xeon (family 6 model 106, AVX-512 without bf16): the initial model 0.291; ours 0.408, 0.418,
# 0.440; TRL's 0.447, 0.482, 0.454. One seed's trajectory is one float order's luck, the same on every machine of a kind, so both sides
# are the mean over the same seeds. A 20-step run's rise (0.13-0.23) varies from seed to seed by about 0.02
# on Zen 4 (0.2 on AVX2) and the measure's own noise is under 0.01: our mean must rise by 0.05, and stay
# within 0.1 of TRL's.
SEEDS = (0, 1, 2)


@pytest.mark.slow  # six runs (ours and TRL's, three seeds each); each step's loss and gradients equal TRL's in workers/learner/test_grpo.py and test_importance_sampling.py
def test_reward_rises_about_as_fast_as_trl(run, tiny, reward_file, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, _ = run
    reward = _load_reward(reward_file)
    tokenizer = AutoTokenizer.from_pretrained(tiny.tokenizer_dir)
    before = _expected_reward(AutoModelForCausalLM.from_pretrained(tiny.model_dir), tokenizer, reward)
    finals = {SETTINGS["seed"]: out / "checkpoints" / f"step-{STEPS:06d}"}
    for seed in SEEDS:
        if seed not in finals:
            _train(tiny, reward_file, tmp_path / f"ours-{seed}", seed, save_steps=STEPS)
            finals[seed] = tmp_path / f"ours-{seed}" / "checkpoints" / f"step-{STEPS:06d}"
    ours = [_expected_reward(AutoModelForCausalLM.from_pretrained(finals[seed]), tokenizer, reward) for seed in SEEDS]
    trl = [
        _expected_reward(_trl_final_model(tiny, reward_file, tmp_path / f"trl-{seed}", seed), tokenizer, reward) for seed in SEEDS
    ]
    print(
        f"expected reward after {STEPS} steps (seeds {SEEDS}): before {before:.3f}, "
        f"ours {' '.join(f'{value:.3f}' for value in ours)}, TRL GRPOTrainer {' '.join(f'{value:.3f}' for value in trl)}"
    )
    assert np.mean(ours) > before + 0.05
    assert np.mean(ours) >= np.mean(trl) - 0.1
