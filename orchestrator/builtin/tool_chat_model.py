"""A tiny tool-calling chat model, built here: a Llama and a BPE tokenizer with Qwen2.5's chat template.

The template is TRL's copy of Qwen2.5's (`trl.chat_template_utils.qwen2_5_chat_template`), so TRL knows
how to parse its replies and renders tools into the system message as Qwen does; `<|im_end|>` is EOS,
`<|endoftext|>` pads, and the tool tags are tokens of their own, as in Qwen's vocabulary. It is
pre-trained on the lookup environment's conversations (lookup_environment.py), rendered with the
environment's tools, so it calls them in the right shape but often on the wrong topic or ignores what
they return. One folder holds the weights and the tokenizer, as on a model hub; cached under a key of
every build setting and rebuilt bit for bit from the same settings.

    python -m orchestrator.builtin.tool_chat_model      # build (or find) it and print its folder
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
from pathlib import Path

from orchestrator.builtin import lookup_environment
from orchestrator.builtin.chat_model import IM_END, PAD, build_tokenizer, save
from orchestrator.builtin.tiny_model import cache_root, cached_build

TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
RECIPE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ToolChatModelSpec:
    vocab_size: int = 600
    hidden_size: int = 96
    intermediate_size: int = 256
    num_layers: int = 2
    num_heads: int = 3  # head_dim 32: vLLM's CPU attention has kernels for few head sizes
    context: int = 512  # Qwen's system message with two tools' schemas is about 300 tokens here
    corpus_examples: int = 3000
    train_steps: int = 400
    batch_size: int = 32
    learning_rate: float = 3e-3
    seed: int = 1234

    def key(self) -> str:
        from trl.chat_template_utils import qwen2_5_chat_template

        task = (lookup_environment.QUESTIONS, lookup_environment.CORPUS_MIX, tool_schemas())
        payload = {"recipe": RECIPE_VERSION, "task": task, "template": qwen2_5_chat_template, **dataclasses.asdict(self)}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def tool_schemas() -> list[dict]:
    """The lookup environment's tools as the chat template renders them (the schemas TRL gives it)."""
    from transformers.utils import get_json_schema

    from orchestrator.contracts.environments import tool_methods

    cls = lookup_environment.LookupEnvironment
    return [get_json_schema(types.MethodType(fn, cls)) for fn in tool_methods(cls)]


def tool_chat_model(spec: ToolChatModelSpec = ToolChatModelSpec()) -> Path:
    """The folder of the cached tiny tool-calling chat model for `spec` (weights + tokenizer), built if needed."""
    root = cache_root() / f"tiny-tool-chat-{spec.key()}"
    cached_build(root, spec.key(), lambda staging: _build(spec, staging / "model"))
    return root / "model"


def _build(spec: ToolChatModelSpec, folder: Path) -> None:
    from trl.chat_template_utils import qwen2_5_chat_template

    from orchestrator.builtin.tiny_model import pretrained_llama  # the same seeded model and pre-training

    chats = lookup_environment.conversations(spec.corpus_examples, spec.seed)
    schemas = tool_schemas()
    tokenizer = build_tokenizer(["x"], spec.vocab_size)  # the template only, to render the corpus
    tokenizer.chat_template = qwen2_5_chat_template
    texts = [tokenizer.apply_chat_template(chat, tools=schemas, tokenize=False) for chat in chats]
    tokenizer = build_tokenizer(texts, spec.vocab_size)
    tokenizer.add_tokens(list(TOOL_TOKENS))
    tokenizer.chat_template = qwen2_5_chat_template
    eos_id, pad_id = tokenizer.convert_tokens_to_ids([IM_END, PAD])
    sequences = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    model = pretrained_llama(
        spec,
        len(tokenizer),
        sequences,
        eos_id=eos_id,
        bos_id=None,
        pad_id=pad_id,
        config_pad_id=pad_id,
        max_positions=spec.context,
    )
    save(model, tokenizer, folder, eos_id, pad_id)


if __name__ == "__main__":
    print(tool_chat_model())
