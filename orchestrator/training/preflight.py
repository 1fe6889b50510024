"""Everything `train` checks before Ray or any engine starts, so bad input fails in seconds with a
message that names what to fix, and no run folder is left behind."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError


@dataclasses.dataclass(frozen=True)
class Checked:
    model: str  # path or hub name the engines and the learner load
    tokenizer: str
    prompts: list[str]
    columns: list[dict]  # each prompt's other dataset columns (reward functions get them as kwargs)
    dropped_prompts: int
    longest_prompt: int  # tokens


def preflight(config: TrainConfig) -> Checked:
    from orchestrator.models import check_prompt_fits, check_token_ids, context_limit, resolve_model
    from orchestrator.training.rewards import resolve
    from workers.learner.model_setup import load_tokenizer

    records = _read_records(config)
    for spec in config.reward_funcs:
        resolve(spec)
    _check_tools(config)
    model, tokenizer_name = resolve_model(config.model, config.tokenizer)
    tokenizer = load_tokenizer(tokenizer_name, config.added_tokens, warn=False)  # the learner warns
    _check_embedding_size(model, tokenizer, resized=bool(config.added_tokens))
    check_token_ids(config.stop_token_ids, tokenizer, "stop_token_ids")
    lengths = [len(tokenizer(record["prompt"])["input_ids"]) for record in records]
    records, lengths, dropped = _check_prompt_lengths(records, lengths, config)
    check_prompt_fits(lengths, config.max_completion_length, context_limit(model, config.rollout.max_model_len), config.prompts)
    prompts = [record["prompt"] for record in records]
    columns = [{key: value for key, value in record.items() if key != "prompt"} for record in records]
    return Checked(model, tokenizer_name, prompts, columns, dropped, max(lengths))


def _check_tools(config: TrainConfig) -> None:
    from workers.tools.runner import resolve

    for index, tool in enumerate(config.tools):
        resolve(tool.fn, key=f"tools[{index}].fn")
    if config.tools and config.skip_special_tokens:
        raise UserError(
            "skip_special_tokens: true would hide tool tags that are special tokens from the text the tool "
            "calls are read from; set skip_special_tokens: false when tools are configured"
        )


def _read_records(config: TrainConfig) -> list[dict]:
    if config.prompts == "builtin:search":
        from orchestrator.builtin import search_task

        return [{"prompt": prompt} for prompt in search_task.all_prompts()]
    if config.prompts == "builtin:lookup":
        from orchestrator.builtin import lookup_task

        return lookup_task.records()
    from orchestrator.data.prompts import read_records

    return read_records(config.prompts)


def _check_embedding_size(model: str, tokenizer, resized: bool) -> None:
    config_file = Path(model) / "config.json"
    if resized or not config_file.is_file():
        return
    vocab = json.loads(config_file.read_text()).get("vocab_size")
    if vocab is not None and len(tokenizer) > vocab:
        raise UserError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's embedding ({config_file}: vocab_size) has "
            f"{vocab}: use the model's tokenizer, or list the new tokens in added_tokens so the embeddings are resized"
        )


def _check_prompt_lengths(records: list[dict], lengths: list[int], config: TrainConfig) -> tuple[list[dict], list[int], int]:
    limit = config.max_prompt_length
    if limit is None:
        return records, lengths, 0
    kept = []
    for index, (record, length) in enumerate(zip(records, lengths)):
        if length <= limit:
            kept.append((record, length))
        elif not config.drop_long_prompts:
            raise UserError(
                f"prompt {index} ({config.prompts}) has {length} tokens, more than max_prompt_length={limit} "
                "(raise max_prompt_length, or set drop_long_prompts: true to skip such prompts)"
            )
    if not kept:
        raise UserError(f"every prompt is longer than max_prompt_length={limit}")
    return [r for r, _ in kept], [n for _, n in kept], len(records) - len(kept)
