"""TRL's tool calling, side by side with TRL's own GRPOTrainer: the same environment class and dataset (and a
plain `tools=[fn]` list) on the built-in tool-calling chat model give the same tool schemas, the same prompt
ids (after `reset`), the same parsed tool calls and tool messages for the same sampled text, the same
completion ids and tool mask, and the same get_reward column. Generation is the one thing scripted, on both
sides, by the context's text: TRL's loop runs as it is, through `_generate_and_score_completions`."""

from __future__ import annotations

import asyncio
import textwrap
import types

import pytest

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.environments import SINGLE
from orchestrator.environments import environment_use, reward_specs
from orchestrator.rewards.functions import score
from workers.environments.chat import Chat, with_observation
from workers.environments.chat_loop import run_chat_sample
from workers.environments.leases import Leases
from workers.rollout.multi_turn import Turn

ENVIRONMENT = textwrap.dedent(
    '''
    class Calculator:
        def reset(self, target: int, **kwargs) -> str:
            self.target = target
            self.calls = []
            return f" Reach {target}."

        def multiply(self, a: int, b: int) -> int:
            """Multiply two integers.

            Args:
                a: The first integer.
                b: The second integer.
            """
            self.calls.append("multiply")
            return a * b

        async def add(self, a: int, b: int) -> int:
            """Add two integers.

            Args:
                a: The first integer.
                b: The second integer.
            """
            self.calls.append("add")
            return a + b

        def get_reward(self) -> float:
            return float(len(self.calls)) + self.target / 100
    '''
)

TOOLS = textwrap.dedent(
    '''
    def multiply(a: int, b: int) -> int:
        """Multiply two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        return a * b


    def calls(completions, **kwargs) -> list[float]:
        return [float(sum(1 for message in c if message["role"] == "tool")) for c in completions]
    '''
)
DRAWN = textwrap.dedent(
    '''
    class Drawn:
        targets = iter(())  # what each reset draws, in order: set by the test

        def reset(self, **kwargs) -> str:
            self.target = next(type(self).targets)
            return f"Reach {self.target}."

        def multiply(self, a: int, b: int) -> int:
            """Multiply two integers.

            Args:
                a: The first integer.
                b: The second integer.
            """
            return a * b

        def get_reward(self) -> float:
            return self.target / 100
    '''
)
ROWS = [
    {"prompt": [{"role": "user", "content": "Compute."}], "target": 12},
    {"prompt": [{"role": "user", "content": "Compute."}], "target": 7},
]


def script(context: str) -> str:
    """What the model 'samples' after `context` (its text), the same on both sides."""
    call = '<tool_call>\n{{"name": "{}", "arguments": {{"a": {}, "b": {}}}}}\n</tool_call>'
    if "<tool_response>" in context:
        return "Done.<|im_end|>"
    if "Reach 7" in context:  # two calls in one reply, one async, and a tool that does not exist
        return call.format("add", 3, 4) + "\n" + call.format("divide", 7, 1) + "<|im_end|>"
    return call.format("multiply", 3, 4) + "<|im_end|>"


@pytest.fixture(scope="module")
def model_dir():
    from orchestrator.builtin.tool_chat_model import tool_chat_model

    return tool_chat_model()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _trl(model_dir, tokenizer, tmp_path, rows=ROWS, **kwargs):
    """TRL's trainer with generation scripted; (its step's outputs, its logs, the prompt ids of each first turn).
    `rows` None: no dataset (TRL's placeholder rows, the environment's reset writing the prompts)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=200,
        max_steps=1,
        report_to=[],
        use_cpu=True,
        log_completions=False,
    )
    dataset = None if rows is None else Dataset.from_list(rows)
    trainer = GRPOTrainer(model=str(model_dir), args=args, train_dataset=dataset, processing_class=tokenizer, **kwargs)
    rows = rows or list(trainer.train_dataset)
    first_prompts = []

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if not first_prompts:
            first_prompts.extend(list(ids) for ids in prompt_ids)
        texts = [script(tokenizer.decode(ids)) for ids in prompt_ids]
        ids = [tokenizer.encode(text, add_special_tokens=False) for text in texts]
        return ids, [[0.0] * len(i) for i in ids]

    trainer._generate_single_turn = generate
    inputs = [row for row in rows for _ in range(2)]
    outputs = trainer._generate_and_score_completions(inputs)
    return trainer, outputs, first_prompts


def _ours(config: TrainConfig, tokenizer, specs: list[str], rows=ROWS):
    """Our side, without Ray: the driver's checks, the tool host's leases, the engine's chat loop, scoring."""
    use = environment_use(config, tokenizer)
    chat = Chat(tokenizer, use.chat_template)
    leases = Leases(lambda call: asyncio.to_thread(call))

    async def turn(context_ids, max_tokens, index):
        ids = tokenizer.encode(script(tokenizer.decode(context_ids)), add_special_tokens=False)[:max_tokens]
        return Turn(ids, tokenizer.decode(ids), [0.0] * len(ids), "stop", None, [0] * len(ids))

    async def one(row):
        lease, observation = await leases.open(use, SINGLE, dict(row))
        messages = with_observation(row["prompt"], observation)
        prompt_ids = chat.prompt_ids(messages, use.schemas[SINGLE])
        template = chat.template(use.schemas[SINGLE], skip_special_tokens=False)

        async def call(calls):
            return await leases.call(lease, calls, use.call_timeout_s)

        sample = await run_chat_sample(0, messages, prompt_ids, 200, 512, use.max_tool_calling_iterations, template, turn, call)
        reward = await leases.reward(lease, use)
        leases.close(lease)
        return sample, reward

    rows = [row for row in rows for _ in range(2)]
    results = [asyncio.run(one(row)) for row in rows]
    samples = [sample for sample, _ in results]
    environment = use.environments.get(SINGLE)
    columns = {
        "environment_reward": [reward for _, reward in results],
        "environment_class": [environment and environment.class_name] * len(rows),
        "target": [row.get("target") for row in rows],
    }
    files = use.files
    scores = score(
        specs + reward_specs(use),
        None,
        [sample.prompt_messages for sample in samples],
        [sample.messages for sample in samples],
        [sample.completion_ids for sample in samples],
        user_files=files,
        **columns,
    )
    return use, samples, scores


def _module(tmp_path, name: str, source: str):
    """`source` written to tmp_path/name.py (our side loads the file) and run as a module (TRL's side)."""
    file = tmp_path / f"{name}.py"
    file.write_text(source)
    module = types.ModuleType(name)
    exec(compile(source, str(file), "exec"), module.__dict__)
    return file, module


def _unpadded(outputs, key: str) -> list[list[int]]:
    mask = outputs["completion_mask"]
    return [row[m.bool()].tolist() for row, m in zip(outputs[key], mask)]


def test_an_environment_runs_as_in_trl(model_dir, tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    file, module = _module(tmp_path, "calculator", ENVIRONMENT)
    trainer, outputs, trl_prompts = _trl(model_dir, tokenizer, tmp_path, environment_factory=module.Calculator)

    config = TrainConfig(model=str(model_dir), environment_factory=f"{file}:Calculator", max_completion_length=200)
    use, samples, scores = _ours(config, tokenizer, [])

    from transformers.utils import get_json_schema

    assert use.schemas[SINGLE] == [get_json_schema(tool) for tool in trainer._env_tools[None]]
    ours_first = [sample.prompt_ids for sample in samples]
    assert ours_first == trl_prompts  # reset's text appended to the last message, tools rendered, as TRL does
    assert [sample.prompt_messages for sample in samples] == list(trainer._logs["prompt"])  # what rewards get
    assert [sample.messages for sample in samples] == list(trainer._logs["completion"])
    # TRL's order: the plain functions' results (an unknown tool's error among them), then the async ones'
    assert samples[2].messages[1] == {"role": "tool", "name": "divide", "content": "{'error': 'Tool divide not found.'}"}
    assert samples[2].messages[2] == {"role": "tool", "name": "add", "content": "7"}
    assert [sample.completion_ids for sample in samples] == _unpadded(outputs, "completion_ids")
    assert [sample.tool_mask for sample in samples] == _unpadded(outputs, "tool_mask")
    assert trainer.reward_func_names == ["Calculator"]
    assert scores["rewards/Calculator"] == pytest.approx(list(trainer._logs["rewards"]["Calculator"]))
    assert scores["rewards/Calculator"] == pytest.approx([1.12, 1.12, 1.07, 1.07])  # one call each: divide does not exist


def test_plain_tool_functions_run_as_in_trl(model_dir, tokenizer, tmp_path, monkeypatch):
    file, module = _module(tmp_path, "tools", TOOLS)
    trainer, outputs, trl_prompts = _trl(model_dir, tokenizer, tmp_path, tools=[module.multiply], reward_funcs=[module.calls])

    config = TrainConfig(
        model=str(model_dir), tools=[f"{file}:multiply"], reward_funcs=[f"{file}:calls"], max_completion_length=200
    )
    use, samples, scores = _ours(config, tokenizer, config.reward_funcs)

    assert [sample.prompt_ids for sample in samples] == trl_prompts
    assert [sample.messages for sample in samples] == list(trainer._logs["completion"])
    assert [sample.completion_ids for sample in samples] == _unpadded(outputs, "completion_ids")
    assert [sample.tool_mask for sample in samples] == _unpadded(outputs, "tool_mask")
    assert scores[f"rewards/{file}:calls"] == pytest.approx(list(trainer._logs["rewards"]["calls"]))


def test_without_a_dataset_the_environment_writes_the_prompts_as_in_trl(model_dir, tokenizer, tmp_path, monkeypatch):
    from orchestrator.builtin.reset_prompts import records

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    file, module = _module(tmp_path, "drawn", DRAWN)
    module.Drawn.targets = iter([12, 7, 7, 12])
    trainer, _, trl_prompts = _trl(model_dir, tokenizer, tmp_path, rows=None, environment_factory=module.Drawn)

    config = TrainConfig(model=str(model_dir), environment_factory=f"{file}:Drawn", max_completion_length=200)
    assert config.prompts == "builtin:reset" and list(trainer.train_dataset)[:1] == records()  # TRL's placeholder row
    from orchestrator.contracts import user_functions

    drawn = user_functions.resolve(f"{file}:Drawn", "environment_factory", {})
    drawn.targets = iter([12, 7, 7, 12])  # the copy our leases load, drawing the same targets
    _, samples, scores = _ours(config, tokenizer, [], rows=records() * 2)  # TRL: one round of placeholder rows
    assert [sample.prompt_ids for sample in samples] == trl_prompts  # reset's text is the whole user message
    assert [sample.prompt_messages for sample in samples] == list(trainer._logs["prompt"])
    assert scores["rewards/Drawn"] == pytest.approx(list(trainer._logs["rewards"]["Drawn"]))
