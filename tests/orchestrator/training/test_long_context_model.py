"""A model whose config declares a 32k context (as Qwen2.5's does) trains with the default settings:
the engines are started with the run's context (longest prompt + completion budget), not the model's,
so a CPU engine does not need a KV cache for one 32k-token sequence before it starts."""

import json
import subprocess
import sys

import pytest

from tests.random_llama import save_random_llama

# Slow (a whole `train` run on this 2-core machine); in the default suite rollout/test_kv_cache.py covers the engines' context taken from the run, not the model.
pytestmark = [pytest.mark.engines, pytest.mark.slow]


def _long_context_model(folder, tokenizer_dir):
    """8 layers of 4 heads of 64: a 32k-token sequence's KV cache is 512 MiB in float32, twice the KV
    cache a CPU engine gets for a short run."""
    from transformers import AutoTokenizer

    save_random_llama(folder, AutoTokenizer.from_pretrained(tokenizer_dir), hidden=256, heads=4, layers=8, context=32768)


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
