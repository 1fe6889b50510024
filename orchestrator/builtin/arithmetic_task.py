"""The built-in chat task: answer a one-digit addition in a chat, with a checkable final answer.

Each record is in TRL's conversational format, with `question` and `answer` columns beside it:

    {"prompt": [{"role": "user", "content": "What is 3 + 4?"}], "question": "What is 3 + 4?", "answer": "7"}

The tiny chat model (chat_model.py) is pre-trained on conversations where only some replies are
right: the ideal reply works the sum and ends with `#### 7` (or `\\boxed{7}`), but others are off
by one, answer with an operand, or ramble without the sum. GRPO with `builtin:math_answer` has to
unlearn those habits. The 100 sums are split once, seeded: most train, the rest are the held-out
evaluation set (`eval_prompts: builtin:arithmetic_eval`), never trained on.

    python -m orchestrator.builtin.arithmetic_task OUT_DIR    # write train.jsonl and eval.jsonl there
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

QUESTION_TEMPLATES = ("What is {a} + {b}?", "Compute {a} + {b}.", "Add {a} and {b}.")
SYSTEM_PROMPT = "You are a careful calculator. End with #### and the answer."
EVAL_PAIRS = 20  # of the 100 sums, held out for evaluation
SPLIT_SEED = 7

# Share of each reply shape in the pre-training corpus; only the first two are right.
CORPUS_MIX = (
    ("ideal", 0.28),
    ("boxed", 0.08),
    ("off_by_one", 0.16),
    ("operand", 0.24),
    ("ramble", 0.24),
)


def pairs() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(train pairs, held-out eval pairs) of one-digit operands; a fixed seeded split."""
    every = [(a, b) for a in range(10) for b in range(10)]
    random.Random(SPLIT_SEED).shuffle(every)
    return sorted(every[EVAL_PAIRS:]), sorted(every[:EVAL_PAIRS])


def question(a: int, b: int, template_index: int = 0) -> str:
    return QUESTION_TEMPLATES[template_index % len(QUESTION_TEMPLATES)].format(a=a, b=b)


def record(a: int, b: int, template_index: int = 0) -> dict:
    text = question(a, b, template_index)
    return {"prompt": [{"role": "user", "content": text}], "question": text, "answer": str(a + b)}


def records() -> list[dict]:
    """The training set: every training pair, each with one template (rotating), in order."""
    train, _ = pairs()
    return [record(a, b, index) for index, (a, b) in enumerate(train)]


def eval_records() -> list[dict]:
    """The held-out set: every eval pair in the first template."""
    _, held_out = pairs()
    return [record(a, b) for a, b in held_out]


def reply(kind: str, a: int, b: int, rng: random.Random) -> str:
    """One pre-training reply of shape `kind` (see CORPUS_MIX)."""
    c = a + b
    if kind == "ideal":
        return f"{a} + {b} = {c}. #### {c}"
    if kind == "boxed":
        return f"{a} + {b} = {c}, so \\boxed{{{c}}}"
    if kind == "off_by_one":
        wrong = c + rng.choice((-1, 1)) if c > 0 else 1
        return f"{a} + {b} = {wrong}. #### {wrong}"
    if kind == "operand":
        return f"#### {rng.choice((a, b))}"
    if kind == "ramble":
        return f"Adding is fun. I like {a} and {b}."
    raise ValueError(f"unknown reply kind {kind!r}")


def conversations(num_examples: int, seed: int) -> list[list[dict]]:
    """Pre-training conversations over all 100 sums (the held-out ones too: RL holds them out,
    pre-training is the model's prior), half with the system prompt; seeded, deterministic."""
    rng = random.Random(seed)
    kinds = [kind for kind, _ in CORPUS_MIX]
    weights = [weight for _, weight in CORPUS_MIX]
    chats = []
    for _ in range(num_examples):
        a, b = rng.randrange(10), rng.randrange(10)
        system = [{"role": "system", "content": SYSTEM_PROMPT}] if rng.random() < 0.5 else []
        user = {"role": "user", "content": question(a, b, rng.randrange(len(QUESTION_TEMPLATES)))}
        assistant = {"role": "assistant", "content": reply(rng.choices(kinds, weights)[0], a, b, rng)}
        chats.append([*system, user, assistant])
    return chats


def write(folder: Path) -> tuple[Path, Path]:
    """Write the training and held-out sets as .jsonl files (the conversational format)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "train.jsonl", folder / "eval.jsonl"
    for path, rows in zip(paths, (records(), eval_records())):
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return paths


if __name__ == "__main__":
    for written in write(Path(sys.argv[1] if len(sys.argv) > 1 else "data/arithmetic")):
        print(written)
