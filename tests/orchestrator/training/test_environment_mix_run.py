"""Two environments in one `train` run with no dataset, one prompt source each (`{name: factory}` routed by
the sources' `environment`): every sample's prompt, which its environment's reset wrote, renders only that
environment's tools, each class's get_reward scores only its own samples, and the run trains."""

import textwrap

import pyarrow.parquet as pq
import pytest
import yaml
from transformers import AutoTokenizer

from tests.orchestrator.training.short_run import metrics, train_config

# Slow (a whole `train` run, about two minutes); the default suite checks the routing and the rendering
# before Ray starts (tests/orchestrator/test_environments.py) and one environment end to end
# (test_environment_run.py).
pytestmark = [pytest.mark.engines, pytest.mark.slow]

ECHO = textwrap.dedent(
    '''
    class Echo:
        def reset(self, **columns) -> str:
            return "Say hello through the echo tool."

        def echo(self, text: str) -> str:
            """Repeat a text.

            Args:
                text: The text.
            """
            self.said = text
            return text

        def get_reward(self) -> float:
            return float(getattr(self, "said", "") == "hello")
    '''
)


def test_two_environments_without_a_dataset_each_render_their_own_tools_and_train(tmp_path):
    (tmp_path / "echo.py").write_text(ECHO)
    config = {
        "model": "builtin:tool-chat",
        "environment_factory": {"lookup": "builtin:lookup", "echo": f"{tmp_path / 'echo.py'}:Echo"},
        "prompts": [
            {"source": "builtin:reset", "name": "lookup", "environment": "lookup", "ratio": 0.5},
            {"source": "builtin:reset", "name": "echo", "environment": "echo", "ratio": 0.5},
        ],
        "max_tool_calling_iterations": 2,
        "max_completion_length": 96,
        "prompts_per_step": 4,
        "num_generations": 2,
        "max_steps": 2,
        "learning_rate": 1.0e-4,
        "rollout": {"engines": 1},
        "plot_steps": 100,
        "output_dir": str(tmp_path / "run"),
    }
    run = train_config(tmp_path, config)
    rows = pq.read_table(run / "rollouts").to_pylist()
    tokenizer = AutoTokenizer.from_pretrained(yaml.safe_load((run / "config.yaml").read_text())["model"])
    prompts = [tokenizer.decode(row["prompt_ids"]) for row in rows]
    lookup = [p for p in prompts if "What is the code of" in p or "Give the code for" in p]
    echo = [p for p in prompts if "Say hello through the echo tool." in p]
    assert len(lookup) == len(echo) == len(rows) // 2  # every prompt was written by its environment's reset
    assert all('"name": "lookup"' in p and '"name": "echo"' not in p for p in lookup)
    assert all('"name": "echo"' in p and '"name": "lookup"' not in p for p in echo)
    for row, prompt in zip(rows, prompts):  # each class's reward is its own environment's samples' only
        mine, other = ("Echo", "LookupEnvironment") if prompt in echo else ("LookupEnvironment", "Echo")
        assert row[f"rewards/{mine}"] is not None and row[f"rewards/{other}"] is None
    steps = metrics(run)
    assert [m["step"] for m in steps] == [1, 2] and all(m["sources/echo/ratio_samples"] == 0.5 for m in steps)
