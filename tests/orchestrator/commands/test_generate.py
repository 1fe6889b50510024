"""`python -m orchestrator generate` end to end, as a user runs it (a subprocess with its own Ray)."""

import subprocess
import sys

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.engines


def test_generate_writes_the_rollout_table_and_shows_the_tokenizer_trap(tiny, tmp_path):
    """Without --tokenizer the engines use the model folder's base tokenizer: `<search>` is not a
    token there, so the stop string never fires and the call vanishes from the text."""
    out = tmp_path / "rollouts.parquet"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "generate",
            "--model",
            str(tiny.model_dir),
            "--out",
            str(out),
            "--num-generations",
            "2",
            "--max-tokens",
            "24",
            "--stop",
            "<search>",
            "--seed",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "generated 64 samples (32 prompts x 2) on 1 engine(s)" in proc.stdout
    assert "tokens/s" in proc.stdout
    table = pq.read_table(out)
    expected = {
        "prompt_index",
        "group_id",
        "sample_index",
        "prompt",
        "prompt_ids",
        "completion",
        "completion_ids",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "engine_id",
    }
    assert expected <= set(table.column_names)
    rows = table.to_pylist()
    assert not any(r["stop_reason"] == "<search>" for r in rows)
    assert not any("<search>" in r["completion"] for r in rows)
    assert not list(tmp_path.glob("*.partial"))
