"""The built-in tool task: answer a question whose answer only the lookup tool knows.

Each prompt asks for the code word of a topic. The codes live in a small table (`CODES`) that the
model never sees in pre-training, so the only way to the answer is a search call:

    Q: what is the code of apple ? A: <search> apple </search><result> jade </result> answer jade

The model writes everything up to `</search>`; the rollout stops there, runs `lookup` (the tool),
appends `<result> ... </result>` as observation tokens and lets the model continue. The tiny model
is pre-trained on the same shape with *random* results (so it learns to copy a result, not the
table), mixed with imperfect habits: searching the wrong topic, ignoring the result, not searching
at all. GRPO with `exact_code_reward` has to unlearn those habits.
"""

from __future__ import annotations

import random
import re

SEARCH_BEGIN, SEARCH_END = "<search>", "</search>"
RESULT_BEGIN, RESULT_END = "<result>", "</result>"
ADDED_TOKENS = (SEARCH_BEGIN, SEARCH_END, RESULT_BEGIN, RESULT_END)

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
)
WORDS = ("amber", "basil", "cobalt", "delta", "ember", "flint", "gamma", "hazel", "indigo", "jade", "koala", "lilac")

# The bundled lookup table: the tool's knowledge, and the reward's ground truth.
CODES = {topic: WORDS[(7 * index + 3) % len(WORDS)] for index, topic in enumerate(TOPICS)}

PROMPT_TEMPLATES = (
    "Q: what is the code of {topic} ? A:",
    "Q: give the code for {topic} . A:",
)

# Share of each completion shape in the pre-training corpus. Only "ideal" reliably scores.
CORPUS_MIX = (
    ("ideal", 0.35),
    ("wrong_topic", 0.25),
    ("ignores_result", 0.20),
    ("no_call", 0.20),
)


def prompt_for(topic: str, template_index: int = 0) -> str:
    return PROMPT_TEMPLATES[template_index % len(PROMPT_TEMPLATES)].format(topic=topic)


def records() -> list[dict]:
    """The built-in training set: every topic with every template, with its answer column."""
    return [{"prompt": prompt_for(topic, t), "answer": CODES[topic]} for t in range(len(PROMPT_TEMPLATES)) for topic in TOPICS]


def lookup(call_text: str, **context) -> str:
    """The demo tool: the code of the topic searched for, or 'unknown'."""
    return f" {CODES.get(call_text.strip(), 'unknown')} "


def completion(kind: str, topic: str, rng: random.Random) -> str:
    """One pre-training completion of shape `kind` (see CORPUS_MIX) for a prompt on `topic`."""
    result = rng.choice(WORDS)  # random, so the model learns to copy, never the table itself
    call = f" {SEARCH_BEGIN} {topic} {SEARCH_END}{RESULT_BEGIN} {result} {RESULT_END}"
    if kind == "ideal":
        return f"{call} answer {result}"
    if kind == "wrong_topic":
        other = rng.choice([t for t in TOPICS if t != topic])
        return f" {SEARCH_BEGIN} {other} {SEARCH_END}{RESULT_BEGIN} {result} {RESULT_END} answer {result}"
    if kind == "ignores_result":
        return f"{call} answer {rng.choice([w for w in WORDS if w != result])}"
    if kind == "no_call":
        return f" answer {result}"
    raise ValueError(f"unknown completion kind {kind!r}")


_ANSWER = re.compile(r"answer\s+(\S+)\s*$")


def exact_code_reward(prompts: list[str], completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion ends with `answer CODE` and CODE is the table's; 0.0 otherwise."""
    rewards = []
    for completion, expected in zip(completions, answer, strict=True):
        final = _ANSWER.search(completion.rsplit(RESULT_END, 1)[-1])
        rewards.append(1.0 if final and final.group(1) == expected else 0.0)
    return rewards


# The lookup task as an agent (`agent: {fn: builtin:lookup}`, configs/agents/lookup.yaml): the same
# conversation, driven through the OpenAI client. The chat template (configs/agents/lookup.jinja) renders
# the messages as the tool loop's text, so the model pre-trained on it sees what it knows. Its tags are
# special tokens, which vLLM leaves out of a reply's text unless asked.
TAGS_IN_TEXT = {"skip_special_tokens": False, "spaces_between_special_tokens": False, "include_stop_str_in_output": True}
_FINAL_WORD = re.compile(r"answer\s+(\w+)")
_SEARCH = re.compile(re.escape(SEARCH_BEGIN) + r"(.*)" + re.escape(SEARCH_END))


async def lookup_agent(client, prompt: str, answer: str, **columns) -> float:
    """Ask the model; when it searches, answer with the tool's result as a `tool` message and ask again.
    Returns 1.0 when the final reply's last `answer WORD` names the table's code, 0.0 otherwise."""
    messages = [{"role": "user", "content": prompt}]
    reply = await _ask(client, messages)
    searched = _SEARCH.search(reply)
    if searched is not None:
        messages += [{"role": "assistant", "content": reply}, {"role": "tool", "content": lookup(searched.group(1))}]
        reply = await _ask(client, messages)
    final = _FINAL_WORD.findall(reply)  # the text may end in EOS's text: special tokens are in it
    return 1.0 if final and final[-1] == answer else 0.0


async def _ask(client, messages: list[dict]) -> str:
    response = await client.chat.completions.create(model="policy", messages=messages, stop=[SEARCH_END], extra_body=TAGS_IN_TEXT)
    return response.choices[0].message.content or ""
