"""A LoRA run end to end (real Ray, vLLM's LoRA support, TRL with PEFT) on the shipped LoRA chat
config: after each engine's first load only the adapter travels, the engines sample from the adapter
the learner trained (their log-probs are HF+PEFT's on the same tokens), each checkpoint is a PEFT
adapter folder, and `export` merges it into a model transformers loads without PEFT."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from safetensors.torch import load_file

# Slow (a whole `train` run on this 2-core machine); in the default suite workers/learner/test_lora.py covers the learner's adapter, its sync and its checkpoint.
pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS = 4
SHIPPED = Path(__file__).parents[3] / "configs" / "chat" / "arithmetic-lora.yaml"


def _train(config: dict, folder: Path, *args: str) -> subprocess.CompletedProcess:
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "orchestrator", "train", *args]
    if not args:
        command += ["--config", str(folder / "config.yaml")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _config(folder: Path, **changes) -> dict:
    config = yaml.safe_load(SHIPPED.read_text())
    config.update({"max_steps": STEPS, "save_steps": 2, "eval_steps": 100, "prompts_per_step": 4, **changes})
    config["output_dir"] = str(folder)
    return config


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora")
    proc = _train(_config(folder / "run"), folder)
    return folder / "run", proc.stdout


def test_only_the_adapter_travels_after_the_first_load(run):
    folder, stdout = run
    checkpoint = folder / "checkpoints" / "step-000002"
    adapter = load_file(str(checkpoint / "adapter_model.safetensors"))
    adapter_bytes = sum(tensor.numel() * tensor.element_size() for tensor in adapter.values())
    base = Path(json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"])
    model_bytes = sum(path.stat().st_size for path in base.glob("*.safetensors"))
    synced = [step["weight_sync/bytes"] for step in _metrics(folder)]
    assert len(synced) == STEPS and len(set(synced)) == 1
    assert adapter_bytes <= synced[0] < adapter_bytes * 1.05  # the adapter's tensors (64-byte aligned)
    assert synced[0] < model_bytes / 3
    assert f"({synced[0] / 1e6:.2f} MB)" in stdout  # each step line says what was sent


def test_the_engines_sample_from_the_adapter_the_learner_trained(run):
    """Step 3 was sampled by policy version 2, the adapter of checkpoint step-2: HF with that adapter
    loaded through PEFT gives the engines' log-probs on the tokens they sampled."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    folder, _ = run
    checkpoint = folder / "checkpoints" / "step-000002"
    base = json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"]
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(checkpoint)).eval()
    rows = pq.read_table(folder / "rollouts" / "step-000003.parquet").to_pylist()
    assert {row["policy_version"] for row in rows} == {2}
    temperature = yaml.safe_load(SHIPPED.read_text())["temperature"]
    gaps, base_gaps = [], []
    for row in rows[:16]:
        prompt, completion = row["prompt_ids"], row["completion_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1] / temperature
        logps = torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        gaps.append((logps - torch.tensor(row["logprobs"])).abs().max().item())
        with torch.no_grad(), model.disable_adapter():  # the base model alone samples otherwise
            base_logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1] / temperature
        base_logps = torch.log_softmax(base_logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
        base_gaps.append((base_logps - logps).abs().max().item())
    assert max(gaps) < 1e-3, gaps
    assert max(base_gaps) > 1e-2  # the adapter matters: without it the log-probs differ
    learner_gap = [step["sampling/sampling_logp_difference/mean"] for step in _metrics(folder)]
    assert max(learner_gap) < 1e-3  # and the learner saw the same, every step


def test_export_merges_the_adapter_into_a_model_transformers_loads(run, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    folder, _ = run
    checkpoint = folder / "checkpoints" / "step-000004"
    out = tmp_path / "merged"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "export", str(checkpoint), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    merged = AutoModelForCausalLM.from_pretrained(out)
    base = json.loads((checkpoint / "adapter_config.json").read_text())["base_model_name_or_path"]
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), str(checkpoint))
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, adapted(ids).logits, atol=1e-4)
    assert (out / "tokenizer_config.json").is_file() and not (out / "adapter_config.json").exists()


@pytest.mark.slow
def test_a_resumed_lora_run_continues_bit_exact(run, tmp_path):
    """Stopped after step 2 (its last checkpoint) and resumed: steps 3 and 4 equal the uninterrupted run's."""
    folder, _ = run
    _train(_config(tmp_path / "run", max_steps=2), tmp_path)
    _train({}, tmp_path, "--resume", str(tmp_path / "run"), f"max_steps={STEPS}")
    resumed, uninterrupted = _metrics(tmp_path / "run"), _metrics(folder)
    for key in ("reward_mean", "loss", "weight_sync/checksum"):
        assert [step[key] for step in resumed] == [step[key] for step in uninterrupted], key


def _refused(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode != 0
    return proc.stderr


def test_a_lora_checkpoint_is_resumed_only_with_its_own_settings_and_is_not_a_model(run, tmp_path):
    folder, _ = run
    checkpoint = folder / "checkpoints" / "step-000004"
    expected = "step-000004 holds a LoRA adapter: resume with the lora: section the run was started with"
    assert expected in _refused("--resume", str(folder), "lora=null")
    assert "adapter was trained with other lora: settings (r: 16 -> 8)" in _refused("--resume", str(folder), "lora.r=8")
    as_model = _refused(f"model={checkpoint}", f"output_dir={tmp_path / 'other'}")
    assert f"model {checkpoint} is a LoRA adapter" in as_model and "python -m orchestrator export" in as_model
