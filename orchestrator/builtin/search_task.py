"""The built-in task: learn to make one well-formed search call and stop.

Each prompt names a topic; the ideal completion is exactly ` <search> TOPIC </search>` and then
EOS. The tiny model is pre-trained on a corpus where only some completions are ideal (wrong
topic, extra words, an unclosed tag, no call at all), so a GRPO run has clear headroom and the
reward curve shows whether training works. The same corpus makes the model emit `<search>` as a
special token, which is what the tokenizer-sync and stop-token tests need.
"""

from __future__ import annotations

import random
import re

SEARCH_BEGIN = "<search>"
SEARCH_END = "</search>"
ADDED_TOKENS = (SEARCH_BEGIN, SEARCH_END)

TOPICS = (
    "apple",
    "river",
    "paris",
    "tiger",
    "piano",
    "copper",
    "winter",
    "rocket",
    "garden",
    "violin",
    "desert",
    "falcon",
    "harbor",
    "lemon",
    "marble",
    "nickel",
    "orange",
    "planet",
    "quartz",
    "salmon",
    "tomato",
    "valley",
    "walnut",
    "zebra",
    "bridge",
    "castle",
    "dragon",
    "forest",
    "glacier",
    "island",
    "jungle",
    "kettle",
)

PROMPT_TEMPLATES = (
    "Q: tell me about {topic} . A:",
    "Q: what is {topic} ? A:",
    "Q: find facts on {topic} . A:",
)

# Share of each completion kind in the pre-training corpus. Only "ideal" earns full reward.
CORPUS_MIX = (
    ("ideal", 0.30),
    ("wrong_topic", 0.37),
    ("extra_word", 0.15),
    ("unclosed", 0.14),
    ("no_call", 0.04),
)


def prompt_for(topic: str, template_index: int = 0) -> str:
    return PROMPT_TEMPLATES[template_index % len(PROMPT_TEMPLATES)].format(topic=topic)


def topic_of(prompt: str) -> str | None:
    """The topic a built-in prompt asks about (None for a prompt of another shape)."""
    for template in PROMPT_TEMPLATES:
        head, tail = template.split("{topic}")
        if prompt.startswith(head) and prompt.endswith(tail):
            return prompt[len(head) : len(prompt) - len(tail)]
    return None


def ideal_completion(topic: str) -> str:
    return f" {SEARCH_BEGIN} {topic} {SEARCH_END}"


def completion(kind: str, topic: str, rng: random.Random) -> str:
    """One pre-training completion of shape `kind` (see CORPUS_MIX) for a prompt on `topic`."""
    other = rng.choice([t for t in TOPICS if t != topic])
    if kind == "ideal":
        return ideal_completion(topic)
    if kind == "wrong_topic":
        return ideal_completion(other)
    if kind == "extra_word":
        return f" {SEARCH_BEGIN} {topic} {other} {SEARCH_END}"
    if kind == "unclosed":
        return f" {SEARCH_BEGIN} {topic}"
    if kind == "no_call":
        return f" {other} is a {rng.choice(('place', 'thing', 'word'))}"
    raise ValueError(f"unknown completion kind {kind!r}")


def records() -> list[dict]:
    """The built-in training set as prompt records (`prompts: builtin:search`)."""
    return [{"prompt": prompt} for prompt in all_prompts()]


def all_prompts() -> list[str]:
    """Every topic with every template: the built-in training set."""
    return [prompt_for(topic, t) for t in range(len(PROMPT_TEMPLATES)) for topic in TOPICS]


def prompts(num_prompts: int, seed: int) -> list[str]:
    """A seeded prompt stream for training and generation on the built-in task."""
    rng = random.Random(seed)
    return [prompt_for(rng.choice(TOPICS), rng.randrange(len(PROMPT_TEMPLATES))) for _ in range(num_prompts)]


_CALL = re.compile(rf"^\s*{re.escape(SEARCH_BEGIN)}\s*(.*?)\s*{re.escape(SEARCH_END)}\s*$", re.S)


def search_call_reward(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 for exactly one closed call on the prompt's topic; 0.5 for a closed call on anything
    else; 0.25 for an opened but unclosed call; 0.0 otherwise. TRL reward signature."""
    rewards = []
    for prompt, completion in zip(prompts, completions, strict=True):
        match = _CALL.match(completion)
        if match:
            rewards.append(1.0 if match.group(1) == topic_of(prompt) else 0.5)
        elif SEARCH_BEGIN in completion:
            rewards.append(0.25)
        else:
            rewards.append(0.0)
    return rewards
