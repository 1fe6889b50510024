"""A tiny chat model, built here: a Llama and a BPE tokenizer with a ChatML chat template.

It is shaped like the chat models users bring (Qwen2.5-Instruct and the like): `<|im_start|>` and
`<|im_end|>` are special tokens, EOS is `<|im_end|>` (so a reply stops at the end of its turn), the
pad token is `<|endoftext|>`, and the chat template renders `[{"role", "content"}, ...]` into

    <|im_start|>user
    What is 3 + 4?<|im_end|>
    <|im_start|>assistant

It is pre-trained on the built-in arithmetic conversations (arithmetic_task.py), so it answers in
the right shape but often wrongly. One folder holds the weights and the tokenizer, as on a model hub.
Cached under a key of every build setting; rebuilt bit for bit from the same settings.

    python -m orchestrator.builtin.chat_model      # build (or find) it and print its folder
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from orchestrator.builtin import arithmetic_task
from orchestrator.builtin.tiny_model import cache_root, cached_build

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
RECIPE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ChatModelSpec:
    vocab_size: int = 400
    hidden_size: int = 96
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 3  # head_dim 32: vLLM's CPU attention has kernels for few head sizes (not 24)
    corpus_examples: int = 4000
    train_steps: int = 500
    batch_size: int = 64
    learning_rate: float = 3e-3
    seed: int = 1234

    def key(self) -> str:
        task = (arithmetic_task.QUESTION_TEMPLATES, arithmetic_task.SYSTEM_PROMPT, arithmetic_task.CORPUS_MIX)
        payload = {"recipe": RECIPE_VERSION, "task": task, "template": CHAT_TEMPLATE, **dataclasses.asdict(self)}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def chat_model(spec: ChatModelSpec = ChatModelSpec()) -> Path:
    """The folder of the cached tiny chat model for `spec` (weights + tokenizer), built if needed."""
    root = cache_root() / f"tiny-chat-{spec.key()}"
    cached_build(root, spec.key(), lambda staging: _build(spec, staging / "model"))
    return root / "model"


def build_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE over `texts` with the ChatML special tokens and the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token=IM_END, pad_token=PAD, additional_special_tokens=[IM_START]
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _build(spec: ChatModelSpec, folder: Path) -> None:
    build(spec, arithmetic_task.conversations(spec.corpus_examples, spec.seed), folder)


def build(spec: ChatModelSpec, chats: list[list[dict]], folder: Path) -> None:
    """A ChatML model of `spec`'s shape, with its tokenizer, pre-trained on `chats` and saved to `folder`."""
    from orchestrator.builtin.tiny_model import pretrained_llama  # the same seeded model and pre-training

    contents = [f"{m['role']}\n{m['content']}" for chat in chats for m in chat]
    tokenizer = build_tokenizer(contents, spec.vocab_size)
    eos_id, pad_id = tokenizer.convert_tokens_to_ids([IM_END, PAD])
    # Each conversation as the template renders it; the reply ends with <|im_end|> (EOS).
    texts = [tokenizer.apply_chat_template(chat, tokenize=False) for chat in chats]
    sequences = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    model = pretrained_llama(spec, len(tokenizer), sequences, eos_id=eos_id, bos_id=None, pad_id=pad_id, config_pad_id=pad_id)
    save(model, tokenizer, folder, eos_id, pad_id)


def save(model, tokenizer, folder: Path, eos_id: int, pad_id: int) -> None:
    """A chat model and its tokenizer in one folder, as on a model hub: generation ends at EOS, with no BOS."""
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = None
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


if __name__ == "__main__":
    print(chat_model())
