"""Resolve what the user named as model and tokenizer, check local model folders from their file
headers (no weights loaded), and check prompts and token ids against them."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from orchestrator.contracts import builtins
from orchestrator.contracts.errors import UserError, first_line


def resolve_model(model: str | None, tokenizer: str | None, keys: tuple[str, str] = ("model", "tokenizer")) -> tuple[str, str]:
    """(model, tokenizer) as paths or hub names. None (or 'builtin:search') is the built-in tiny
    model of the search task, 'builtin:lookup' the one of the lookup-tool task, 'builtin:chat' the tiny
    chat model (one folder with weights and a ChatML tokenizer, like a hub chat model), 'builtin:tool-chat'
    the tiny tool-calling chat model (Qwen2.5's template), 'builtin:reasoning-chat' the tiny chat model of
    reasoning-gym's basic_arithmetic. `keys` are the
    names the user gave them (config keys or command-line flags), for the errors."""
    if model in ("builtin:chat", "builtin:tool-chat", "builtin:reasoning-chat"):
        from orchestrator.builtin.chat_model import chat_model
        from orchestrator.builtin.reasoning_chat_model import reasoning_chat_model
        from orchestrator.builtin.tool_chat_model import tool_chat_model

        builders = {
            "builtin:chat": chat_model,
            "builtin:tool-chat": tool_chat_model,
            "builtin:reasoning-chat": reasoning_chat_model,
        }
        folder = str(builders[model]())
        return folder, tokenizer or folder
    if model is None or model.startswith("builtin:"):
        from orchestrator.builtin.tiny_model import TASKS, TinyModelSpec, tiny_model

        task = "search" if model is None else model.removeprefix("builtin:")
        if task not in TASKS:
            raise UserError(
                f"model: unknown built-in {model!r} (built-ins: {', '.join('builtin:' + t for t in builtins.MODELS)})"
            )
        built = tiny_model(TinyModelSpec(task=task))
        return str(built.model_dir), tokenizer or str(built.tokenizer_dir)
    model, tokenizer = _expand(model), _expand(tokenizer)
    for name, value in zip(keys, (model, tokenizer)):
        if value and value.startswith((".", "/")) and not Path(value).exists():
            raise UserError(f"{name} path {value} does not exist (expected a model folder or a hub name)")
        if value and Path(value).is_file():
            raise UserError(f"{name} path {value} is a file (expected a model folder or a hub name)")
    if Path(model).is_dir():
        check_model_folder(Path(model), keys[0])
    return model, tokenizer or model


def check_model_folder(folder: Path, key: str) -> None:
    """Fail in seconds, not in the learner after Ray started, if `folder` lacks a usable
    config.json or complete weights, or is a LoRA adapter rather than a model."""
    if (folder / "adapter_config.json").is_file():
        raise UserError(
            f"{key} {folder} is a LoRA adapter (PEFT's adapter folder), not a model: merge it into its base model "
            f"first (python -m orchestrator export {folder} --out DIR) and give DIR"
        )
    problem = model_folder_problem(folder)
    if problem:
        raise UserError(f"{key} {folder}: {problem}")


def model_folder_problem(folder: Path) -> str | None:
    """What makes `folder` unloadable as a transformers model (or, holding PEFT's adapter_config.json,
    as a LoRA adapter), or None. Reads file headers only: a safetensors header lists every tensor's
    byte range, so a truncated file is caught without reading the weights."""
    if (folder / "adapter_config.json").is_file():
        adapter = folder / "adapter_model.safetensors"
        if not adapter.is_file():
            return "adapter_model.safetensors is missing (expected a PEFT adapter folder, as written by save_pretrained)"
        return _safetensors_problem(adapter)
    config = folder / "config.json"
    if not config.is_file():
        return "no config.json (expected a transformers model folder, as written by save_pretrained)"
    try:
        if not isinstance(json.loads(config.read_bytes()), dict):
            return "config.json is not a JSON object (expected a transformers model config)"
    except json.JSONDecodeError as error:
        return f"config.json:{error.lineno}: invalid JSON ({error.msg}); expected a transformers model config"
    except UnicodeDecodeError:
        return "config.json is not UTF-8 text (expected a transformers model config)"
    weights = sorted(folder.glob("*.safetensors"))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_bytes())["weight_map"].values())
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, AttributeError, TypeError):
            return f"{index.name} is not a valid shard index (expected a JSON object with a weight_map)"
        missing = sorted(name for name in shards if not (folder / name).is_file())
        if missing:
            return f"weight shards {missing} named in {index.name} are missing"
    for file in weights:
        problem = _safetensors_problem(file)
        if problem:
            return problem
    if weights:
        return None
    bins = sorted(folder.glob("pytorch_model*.bin"))
    if not bins:
        return "no weight file (expected model.safetensors, sharded *.safetensors with their index, or pytorch_model.bin)"
    for file in bins:
        with file.open("rb") as head:
            magic = head.read(2)
        # torch.save writes a zip archive whose index sits at its end, so a truncated copy has none;
        # older pickled files cannot be checked without loading them
        if not magic or (magic == b"PK" and not zipfile.is_zipfile(file)):
            return f"{file.name} is empty or truncated; re-copy or re-save the model"
    return None


def _safetensors_problem(file: Path) -> str | None:
    from safetensors import SafetensorError, safe_open

    try:  # parses the header and checks its byte ranges against the file's size; reads no tensor
        with safe_open(str(file), framework="numpy"):
            return None
    except (SafetensorError, OSError) as error:
        return f"{file.name} is not a complete safetensors file ({error}); re-copy or re-save the model"


def _expand(value: str | None) -> str | None:
    return str(Path(value).expanduser()) if value and value.startswith("~") else value


def loaded_config(key: str, name: str, not_loaded: str = "does not load as a model"):
    """The transformers config of model `name` (no weights loaded), or a UserError naming `key`. The
    preflight of every extra model a run serves (judges, reward models) starts here."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(name)
    except Exception as error:
        raise UserError(f"{key}: {name!r} {not_loaded}: {first_line(error)}") from None


def check_architecture(key: str, name: str, model_config, suffix: str, instead: str) -> None:
    """Refuse a model none of whose architectures ends in `suffix` ('ForCausalLM'): `instead` says what it
    must be and why."""
    architectures = model_config.architectures or []
    if not any(architecture.endswith(suffix) for architecture in architectures):
        raise UserError(f"{key}: {name!r} is a {', '.join(architectures) or 'model of no stated architecture'}, {instead}")


def loaded_tokenizer(key: str, name: str):
    """The tokenizer at `name`, or a UserError naming `key`."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as error:
        raise UserError(f"{key}: no tokenizer loads from {name!r}: {first_line(error)}") from None


def check_token_ids(token_ids: list[int], tokenizer, key: str) -> None:
    vocab = len(tokenizer)
    bad = [token for token in token_ids if not 0 <= token < vocab]
    if bad:
        raise UserError(f"{key}: token ids {bad} are outside the tokenizer's vocabulary (0..{vocab - 1})")


def context_limit(model: str, max_model_len: int | None) -> int | None:
    """Prompt + completion tokens an engine accepts: rollout.max_model_len, else the model's
    max_position_embeddings (when its config.json is local), else unknown (None)."""
    if max_model_len is not None:
        return max_model_len
    config = Path(model) / "config.json"
    if config.is_file():
        return json.loads(config.read_text()).get("max_position_embeddings")
    return None


def check_prompt_fits(lengths: list[int], max_new_tokens: int, limit: int | None, where: str) -> None:
    """Fail before any engine starts if a prompt plus its completion budget exceeds the context."""
    if limit is None:
        return
    for index, length in enumerate(lengths):
        if length + max_new_tokens > limit:
            raise UserError(
                f"prompt {index} ({where}) has {length} tokens; with {max_new_tokens} completion tokens that exceeds the "
                f"model's context of {limit} (shorten the prompt, lower the completion budget, or raise rollout.max_model_len)"
            )
