"""The reasoning-gym chat model's pre-training corpus (the build itself runs with its config, not here):
reasoning-gym's own questions, with replies of which the task's own score finds only some right."""

import json

from orchestrator.builtin.reasoning_chat_model import CORPUS_MIX, TASK, TASK_CONFIG, conversations
from orchestrator.builtin.reasoning_gym_answer import reasoning_gym_reward
from orchestrator.data.reasoning_gym import dataset


def test_the_corpus_asks_reasoning_gyms_questions_and_is_right_about_as_often_as_its_mix_says():
    chats = conversations(400, seed=3)
    questions = dataset(TASK, {**TASK_CONFIG, "size": 400, "seed": 3})
    assert [chat[1]["content"] for chat in chats] == [entry["question"] for entry in questions]
    assert {chat[0]["role"] for chat in chats} == {"system"} and {chat[2]["role"] for chat in chats} == {"assistant"}
    cells = [json.dumps({"task": TASK, "config": {**TASK_CONFIG, "size": 400, "seed": 3}, "index": i}) for i in range(400)]
    scores = reasoning_gym_reward([chat[2]["content"] for chat in chats], cells)
    right = dict(CORPUS_MIX)["right"]
    assert abs(sum(scores) / len(scores) - right) < 0.08  # off-by-one, operand, untagged and rambling replies score 0
    assert conversations(400, seed=3) == chats  # seeded: the model rebuilds bit for bit
