"""reasoning-gym's tasks as a prompt source and its own scores as the reward, checked against
reasoning-gym's own dataset and scorer."""

import json

import pytest
import reasoning_gym
from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

from orchestrator.builtin.reasoning_gym_answer import reasoning_gym_reward
from orchestrator.config.sources import ReasoningGymConfig
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError
from orchestrator.data import reasoning_gym as source

SUMS = {"min_terms": 2, "max_terms": 2, "max_digits": 1, "operators": ["+", "-"]}


def _read(task="basic_arithmetic", seed=0, **settings):
    return source.read(f"reasoning_gym:{task}", ReasoningGymConfig(**{"size": 12, **settings}), "prompts", seed)


def test_a_task_becomes_reasoning_gyms_questions_in_conversations_with_their_answers():
    data = _read(config=SUMS, system_prompt="direct")
    own = reasoning_gym.create_dataset("basic_arithmetic", size=12, seed=0, **SUMS)
    assert len(data.prompts) == 12
    for prompt, columns, entry in zip(data.prompts, data.columns, own, strict=True):
        assert prompt == [{"role": "system", "content": SYSTEM_PROMPTS["direct"]}, {"role": "user", "content": entry["question"]}]
        assert columns["answer"] == entry["answer"] and columns["reasoning_gym_task"] == "basic_arithmetic"
    assert _read(config=SUMS, system_prompt="direct").prompts == data.prompts  # the seed decides the questions
    assert _read(config=SUMS, seed=1).prompts != data.prompts
    assert _read(config=SUMS, system_prompt=None).prompts[0] == data.prompts[0][1:]


def test_the_reward_is_the_tasks_own_score_of_the_last_answer_in_tags():
    data = _read(config=SUMS)
    own = reasoning_gym.create_dataset("basic_arithmetic", size=12, seed=0, **SUMS)
    answers = [columns["answer"] for columns in data.columns]
    completions = [
        f"<answer>{answers[0]}</answer>",  # right
        f"<answer>{int(answers[1]) + 1}</answer>",  # wrong
        answers[2],  # right, but without the tags
        f"<answer>{int(answers[3]) + 1}</answer> no, <answer>{answers[3]}</answer>",  # the last one counts
        f"<answer>x {answers[4]}</answer>",  # partial credit, as the task gives it
        "",
    ] * 2
    scores = reasoning_gym_reward(completions, [columns["reasoning_gym"] for columns in data.columns])
    expected = [own.score_answer(extract_answer(text), entry) for text, entry in zip(completions, own, strict=True)]
    assert scores == expected
    assert scores[:4] == [1.0, 0.0, 0.0, 1.0] and 0 < scores[4] < 1
    conversational = [[{"role": "assistant", "content": text}] for text in completions]
    assert reasoning_gym_reward(conversational, [c["reasoning_gym"] for c in data.columns]) == expected


def test_a_composite_mixes_tasks_and_each_row_is_scored_by_its_own_task():
    datasets = [{"name": "basic_arithmetic", "weight": 3, "config": SUMS}, {"name": "spell_backward", "weight": 1, "config": {}}]
    data = _read("composite", config={"datasets": datasets}, size=40)
    tasks = [columns["reasoning_gym_task"] for columns in data.columns]
    assert set(tasks) == {"basic_arithmetic", "spell_backward"} and tasks.count("basic_arithmetic") > tasks.count(
        "spell_backward"
    )
    right = [f"<answer>{columns['answer']}</answer>" for columns in data.columns]
    assert reasoning_gym_reward(right, [c["reasoning_gym"] for c in data.columns]) == [1.0] * 40
    assert json.loads(data.columns[0]["reasoning_gym"])["task"] == "composite"


def test_a_reasoning_gym_source_is_scored_by_its_own_task_unless_reward_funcs_say_otherwise():
    assert TrainConfig(prompts="reasoning_gym:basic_arithmetic").reward_funcs == ["builtin:reasoning_gym"]
    assert TrainConfig(prompts="reasoning_gym:gcd", reward_funcs=["builtin:math_answer"]).reward_funcs == ["builtin:math_answer"]


@pytest.mark.parametrize(
    ("task", "settings", "message"),
    [
        ("basic_arithmetc", {}, "prompts: reasoning-gym has no task 'basic_arithmetc' (did you mean basic_arithmetic,"),
        (
            "basic_arithmetic",
            {"config": {"max_termz": 2}},
            "reasoning_gym.config: reasoning-gym's task 'basic_arithmetic' refused",
        ),
        ("basic_arithmetic", {"config": {"min_terms": 0}}, "(AssertionError: min_terms must be positive)"),
        ("basic_arithmetic", {"system_prompt": "terse"}, "reasoning_gym.system_prompt: 'terse' is not one of reasoning-gym's"),
        ("basic_arithmetic", {"config": {"seed": 3}}, "reasoning_gym.config.seed: set reasoning_gym.seed instead"),
    ],
)
def test_bad_settings_name_the_key_to_fix(task, settings, message):
    with pytest.raises(UserError) as raised:
        _read(task, **settings)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_rows_of_another_source_are_not_scored_by_it():
    data = _read(config=SUMS)
    cells = [data.columns[0]["reasoning_gym"], None]
    assert reasoning_gym_reward([f"<answer>{data.columns[0]['answer']}</answer>", "<answer>1</answer>"], cells) == [1.0, None]
