"""The lookup task as a TRL environment (`environment_factory: builtin:lookup`, configs/environments/lookup.yaml).

Each prompt asks for the code word of a topic, which only the environment's table knows (lookup_task.py's
`CODES`). The model calls the environment's tools through its chat template, as Qwen2.5 writes calls:

    user: What is the code of apple?
    assistant: <tool_call>{"name": "lookup", "arguments": {"topic": "apple"}}</tool_call>
    tool: jade
    assistant: <tool_call>{"name": "answer", "arguments": {"code": "jade"}}</tool_call>
    tool: submitted
    assistant: Done.

The environment owns the reward (`get_reward`): 0.5 for looking the topic up, and 0.5 more when the code
it was given is the topic's.
The built-in tool-calling chat model (tool_chat_model.py) is pre-trained on such conversations with random
results and imperfect habits (searching the wrong topic, ignoring the result, answering without a search),
which GRPO has to unlearn.
"""

from __future__ import annotations

import random

from orchestrator.builtin.lookup_task import CODES, TOPICS, WORDS

QUESTIONS = ("What is the code of {topic}?", "Give the code for {topic}.")
CORPUS_MIX = (("ideal", 0.35), ("wrong_topic", 0.25), ("ignores_result", 0.20), ("no_call", 0.20))


class LookupEnvironment:
    """A code table the model can search, and a box for its answer."""

    draws = random.Random(0)  # the topics drawn without a dataset, in the order the process resets

    def reset(self, topic: str | None = None, **columns) -> str | None:
        """A row's topic; or, without a dataset (`prompts: builtin:reset`), a topic drawn here and its question,
        which becomes the prompt (TRL's reset rule)."""
        self.topic = topic if topic is not None else self.draws.choice(TOPICS)
        self.searched: list[str] = []
        self.answered: str | None = None
        return None if topic is not None else self.draws.choice(QUESTIONS).format(topic=self.topic)

    def lookup(self, topic: str) -> str:
        """Look up the code of a topic.

        Args:
            topic: The topic.
        """
        self.searched.append(topic.strip())
        return CODES.get(topic.strip(), "unknown")

    def answer(self, code: str) -> str:
        """Submit the final code.

        Args:
            code: The code.
        """
        self.answered = code.strip()
        return "submitted"

    def get_reward(self) -> float:
        return 0.5 * (self.topic in self.searched) + 0.5 * (self.answered == CODES[self.topic])


def records() -> list[dict]:
    """The training set: every topic with every question, as a conversation, with its topic column."""
    return [
        {"prompt": [{"role": "user", "content": question.format(topic=topic)}], "topic": topic}
        for question in QUESTIONS
        for topic in TOPICS
    ]


def _call(name: str, **arguments) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def conversation(kind: str, topic: str, rng: random.Random) -> list[dict]:
    """One pre-training conversation of shape `kind` (CORPUS_MIX), with a random result: the model learns to
    copy a result, never the table."""
    question = {"role": "user", "content": rng.choice(QUESTIONS).format(topic=topic)}
    result = rng.choice(WORDS)
    searched = rng.choice([t for t in TOPICS if t != topic]) if kind == "wrong_topic" else topic
    answer = rng.choice([w for w in WORDS if w != result]) if kind == "ignores_result" else result
    search = [] if kind == "no_call" else [_call("lookup", topic=searched), {"role": "tool", "name": "lookup", "content": result}]
    submit = [_call("answer", code=answer), {"role": "tool", "name": "answer", "content": "submitted"}]
    return [question, *search, *submit, {"role": "assistant", "content": "Done."}]


def conversations(count: int, seed: int) -> list[list[dict]]:
    rng = random.Random(seed)
    kinds, weights = zip(*CORPUS_MIX)
    return [conversation(rng.choices(kinds, weights)[0], rng.choice(TOPICS), rng) for _ in range(count)]
