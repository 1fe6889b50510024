"""The embedded default model: a tiny Llama and its BPE tokenizer, built here from a seeded corpus.

Nothing can be downloaded, so tests and the default run build their own model. The build trains
a byte-level BPE tokenizer and a ~0.16M-parameter Llama on the built-in search task's corpus, so
the model really emits `<search>` and `</search>` and stops at EOS. The result is cached under a
key of every build setting and rebuilt bit for bit from the same settings.

It produces the seed trap on purpose:
  model/      config + weights + the *base* tokenizer (no `<search>`), as a model hub would ship it
  tokenizer/  the learner's tokenizer: the base one plus `<search>`/`</search>` as special tokens
Neither tokenizer has a pad token (GPT-2 style).

    python -m orchestrator.builtin.tiny_model          # build (or find) it and print its paths
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from orchestrator.builtin import lookup_task, search_task

TASKS = {"search": search_task, "lookup": lookup_task}  # task name -> module with corpus() and ADDED_TOKENS
EOS_TOKEN = "<|endoftext|>"
RECIPE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class TinyModelSpec:
    task: str = "search"  # the corpus it is pre-trained on (see TASKS)
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 192
    num_layers: int = 2
    num_heads: int = 2
    corpus_examples: int = 4000
    train_steps: int = 300
    batch_size: int = 64
    learning_rate: float = 3e-3
    seed: int = 1234

    def key(self) -> str:
        module = TASKS[self.task]
        task = (module.TOPICS, module.PROMPT_TEMPLATES, module.CORPUS_MIX, module.ADDED_TOKENS)
        payload = json.dumps({"recipe": RECIPE_VERSION, "corpus": task, **dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class TinyModel:
    model_dir: Path  # weights + base tokenizer
    tokenizer_dir: Path  # learner tokenizer with the added special tokens


def cache_root() -> Path:
    return Path(os.environ.get("ORCHESTRATOR_CACHE", Path.home() / ".cache" / "orchestrator"))


def tiny_model(spec: TinyModelSpec = TinyModelSpec()) -> TinyModel:
    """Return the cached tiny model for `spec`, building it first if needed."""
    root = cache_root() / f"tiny-llama-{spec.task}-{spec.key()}"
    cached_build(root, spec.key(), lambda staging: _build(spec, staging / "model", staging / "tokenizer"))
    return TinyModel(model_dir=root / "model", tokenizer_dir=root / "tokenizer")


def cached_build(root: Path, key: str, build) -> None:
    """Build into a staging folder beside `root` with `build(staging)` and rename it to `root`, unless
    `root` is complete already: a reader never sees a half-built model, and two processes building
    the same one at once both end with the finished folder."""
    if (root / "DONE").exists():
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=root.name + ".", dir=root.parent))
    try:
        build(staging)
        (staging / "DONE").write_text(key + "\n")
        try:
            staging.rename(root)
        except OSError:  # another process finished the same build first
            if not (root / "DONE").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def corpus(task: str, num_examples: int, seed: int) -> list[tuple[str, str]]:
    """(prompt, completion) pairs drawn from a task's CORPUS_MIX; seeded, deterministic."""
    module = TASKS[task]
    rng = random.Random(seed)
    kinds = [kind for kind, _ in module.CORPUS_MIX]
    weights = [weight for _, weight in module.CORPUS_MIX]
    pairs = []
    for _ in range(num_examples):
        topic = rng.choice(module.TOPICS)
        prompt = module.prompt_for(topic, rng.randrange(len(module.PROMPT_TEMPLATES)))
        pairs.append((prompt, module.completion(rng.choices(kinds, weights)[0], topic, rng)))
    return pairs


def _texts(spec: TinyModelSpec) -> list[str]:
    return [prompt + completion for prompt, completion in corpus(spec.task, spec.corpus_examples, spec.seed)]


def _build_tokenizers(spec: TinyModelSpec, texts: list[str], added_tokens: tuple[str, ...]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AddedToken, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    base = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS_TOKEN, bos_token=EOS_TOKEN)
    learner = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS_TOKEN, bos_token=EOS_TOKEN)
    learner.add_tokens([AddedToken(t, special=True, normalized=False) for t in added_tokens], special_tokens=True)
    return base, learner


def _build(spec: TinyModelSpec, model_dir: Path, tokenizer_dir: Path) -> None:
    texts = _texts(spec)
    base, learner = _build_tokenizers(spec, texts, TASKS[spec.task].ADDED_TOKENS)
    eos_id = learner.convert_tokens_to_ids(EOS_TOKEN)

    sequences = [learner(text)["input_ids"] + [eos_id] for text in texts]
    model = pretrained_llama(spec, len(learner), sequences, eos_id=eos_id, bos_id=eos_id, pad_id=eos_id)
    model.generation_config.pad_token_id = None
    model.save_pretrained(model_dir, safe_serialization=True)
    base.save_pretrained(model_dir)
    learner.save_pretrained(tokenizer_dir)


def pretrained_llama(
    spec,
    vocab_size: int,
    sequences: list[list[int]],
    eos_id: int,
    bos_id: int | None,
    pad_id: int,
    config_pad_id: int | None = None,
    max_positions: int = 256,
):
    """A Llama of `spec`'s shape (hidden_size, intermediate_size, num_layers, num_heads, seed, and
    the pre-training fields), seeded and pre-trained on `sequences`, bit for bit the same on any
    machine. `pad_id` pads the pre-training batches; `config_pad_id` goes into the model config;
    `max_positions` is its context."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=max_positions,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=config_pad_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bit-for-bit reproducible builds, whatever the machine
    try:
        torch.manual_seed(spec.seed)
        model = LlamaForCausalLM(config)
        _pretrain(model, sequences, spec, pad_id=pad_id)
    finally:
        torch.set_num_threads(threads)
    return model


def _pretrain(model, sequences: list[list[int]], spec: TinyModelSpec, pad_id: int) -> None:
    import torch

    generator = torch.Generator().manual_seed(spec.seed)
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate)
    model.train()
    for _ in range(spec.train_steps):
        batch = torch.randint(len(sequences), (spec.batch_size,), generator=generator)
        loss = model(input_ids=ids[batch], attention_mask=mask[batch], labels=labels[batch]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


if __name__ == "__main__":
    built = tiny_model()
    print(f"model:     {built.model_dir}\ntokenizer: {built.tokenizer_dir}")
