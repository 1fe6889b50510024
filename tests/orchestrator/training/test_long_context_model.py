"""A model whose config declares a 32k context (as Qwen2.5's does) trains with the default settings:
the engines are started with the run's context (longest prompt + completion budget), not the model's,
so a CPU engine does not need a KV cache for one 32k-token sequence before it starts."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engines


def _long_context_model(folder, tokenizer_dir):
    """Random weights, 8 layers of 4 heads of 64: a 32k-token sequence's KV cache is 512 MiB in float32,
    twice the KV cache a CPU engine gets for a short run."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def test_a_model_with_a_32k_context_trains_with_the_default_settings(tmp_path, tiny):
    model = tmp_path / "long-context"
    _long_context_model(model, tiny.tokenizer_dir)
    run = tmp_path / "run"
    args = [f"model={model}", "max_steps=2", "prompts_per_step=2", "num_generations=2"]
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *args, "max_completion_length=16", f"output_dir={run}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
