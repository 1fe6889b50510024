"""A tiny chat model for reasoning-gym's `basic_arithmetic`, built here: the ChatML model of
chat_model.py, pre-trained on that task's own questions (sums of two one-digit
numbers, as configs/reasoning-gym/basic-arithmetic.yaml asks them) under reasoning-gym's `direct`
system prompt.

Only some of its pre-training replies are right: the ideal reply is `<answer>7</answer>`, but others
are off by one, answer with an operand, leave out the tags, or ramble. GRPO with the task's own
score (`builtin:reasoning_gym`) has to unlearn those habits. Cached under a key of every build
setting; rebuilt bit for bit from the same settings.

    python -m orchestrator.builtin.reasoning_chat_model      # build (or find) it and print its folder
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from pathlib import Path

from orchestrator.builtin.chat_model import CHAT_TEMPLATE, ChatModelSpec, build
from orchestrator.builtin.tiny_model import cache_root, cached_build

TASK = "basic_arithmetic"
TASK_CONFIG = {  # the shipped config's (configs/reasoning-gym/basic-arithmetic.yaml)
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+"],
    "allow_parentheses": False,
    "allow_negation": False,
}
SYSTEM_PROMPT = "direct"  # reasoning-gym's name
CORPUS_MIX = (("right", 0.35), ("off_by_one", 0.15), ("operand", 0.15), ("untagged", 0.2), ("ramble", 0.15))
RECIPE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ReasoningChatSpec(ChatModelSpec):
    """The arithmetic chat model's shape and pre-training, on reasoning-gym's questions."""

    def key(self) -> str:
        task = (TASK, TASK_CONFIG, SYSTEM_PROMPT, CORPUS_MIX)
        payload = {"recipe": RECIPE_VERSION, "task": task, "template": CHAT_TEMPLATE, **dataclasses.asdict(self)}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def reasoning_chat_model(spec: ReasoningChatSpec = ReasoningChatSpec()) -> Path:
    """The folder of the cached model for `spec` (weights + tokenizer), built if needed."""
    root = cache_root() / f"tiny-reasoning-chat-{spec.key()}"
    cached_build(root, spec.key(), lambda staging: build(spec, conversations(spec.corpus_examples, spec.seed), staging / "model"))
    return root / "model"


def conversations(count: int, seed: int) -> list[list[dict]]:
    """Pre-training conversations: reasoning-gym's questions with replies of every shape in CORPUS_MIX."""
    from reasoning_gym.utils import SYSTEM_PROMPTS

    from orchestrator.data.reasoning_gym import dataset

    questions = dataset(TASK, {**TASK_CONFIG, "size": count, "seed": seed})
    rng = random.Random(seed)
    kinds, weights = zip(*CORPUS_MIX)
    chats = []
    for entry in questions:
        reply = _reply(rng.choices(kinds, weights)[0], entry, rng)
        chats.append(
            [
                {"role": "system", "content": SYSTEM_PROMPTS[SYSTEM_PROMPT]},
                {"role": "user", "content": entry["question"]},
                {"role": "assistant", "content": reply},
            ]
        )
    return chats


def _reply(kind: str, entry: dict, rng: random.Random) -> str:
    answer = int(entry["answer"])
    operands = [int(term) for term in entry["metadata"]["expression"].replace("+", " ").replace("-", " ").split()]
    if kind == "right":
        return f"<answer>{answer}</answer>"
    if kind == "off_by_one":
        return f"<answer>{answer + rng.choice((-1, 1))}</answer>"
    if kind == "operand":
        return f"<answer>{rng.choice(operands)}</answer>"
    if kind == "untagged":
        return str(answer)
    return "Let me think about it."


if __name__ == "__main__":
    print(reasoning_chat_model())
