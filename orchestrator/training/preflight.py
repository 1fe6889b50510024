"""Everything `train` checks before Ray or any engine starts, so bad input fails in seconds with a
message that names what to fix, and no run folder is left behind."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from orchestrator.config.sources import PromptSource
from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError
from orchestrator.data import reasoning_gym
from orchestrator.data.prompt_data import PromptData, select
from orchestrator.data.prompts import read_prompt_data
from orchestrator.data.sources import Sources, WithColumn, join
from orchestrator.hub_pins import Pin
from orchestrator.rollout.samples import Ragged
from orchestrator.training.evaluation import EvalSet
from orchestrator.training.requests import PromptSet, tokenize_prompts

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from orchestrator.training.run_dir import RunDir


@dataclasses.dataclass(frozen=True)
class Checked:
    model: str  # path or hub name the engines and the learner load
    tokenizer: str
    canonical: PreTrainedTokenizerBase  # the canonical tokenizer, built once: added tokens, chat template, pad fallback
    data: PromptSet  # the prompts to train on (those within max_prompt_length), their ids, columns and eval set
    dropped_prompts: int
    longest_prompt: int  # tokens
    chat_template: str | None = None  # the chat_template's text (a file read here), for the learner
    pins: tuple[Pin, ...] = ()  # model_revision and prompts_revision, resolved to commits (orchestrator/hub_pins.py)


def preflight(config: TrainConfig, tokenizer_from: str | None = None, resumed: RunDir | None = None) -> Checked:
    """`tokenizer_from`: where the canonical tokenizer was saved (a checkpoint, on resume); `resumed`: the
    run folder a resume continues, whose Hub pins must still hold. Every load here reads the commits the
    Hub pins resolve to."""
    from orchestrator import hub_pins
    from orchestrator.contracts.reward_models import is_model
    from orchestrator.data.conversations import split_messages
    from orchestrator.environments import environment_use
    from orchestrator.judges import pools as judges
    from orchestrator.models import check_prompt_fits, context_limit, resolve_model
    from orchestrator.rewards import models as reward_models
    from orchestrator.rewards.functions import resolve
    from orchestrator.training.trackers import check_available

    model, tokenizer_name = resolve_model(config.model, config.tokenizer)
    config, pins = hub_pins.pin(config, model, resumed.root if resumed else None)
    data, sources = _training_data(config)
    for spec in config.reward_plan.specs:  # reads each user file: the copy every process gets (contracts/user_functions.py)
        if not is_model(spec):
            resolve(spec)
    _check_tools(config)
    _check_agent(config, data.columns)
    check_available(config.report_to)
    tokenizer, template = _canonical_tokenizer(config, model, tokenizer_name, tokenizer_from)
    if config.lora is not None:
        from workers.learner.lora import check_model

        check_model(model, config.lora, config.model_revision)
    tool_calling = environment_use(config, tokenizer)
    records, chat, prompt_ids, names = _rendered(data, _where(config), config, tokenizer, tokenizer_name, tool_calling)
    kept = _check_prompt_lengths(prompt_ids, config)
    dropped = len(records) - len(kept)
    if dropped:
        records, prompt_ids = [records[i] for i in kept], [prompt_ids[i] for i in kept]
        names = None if names is None else [names[i] for i in kept]
        sources = None if sources is None else sources.kept(kept)
    lengths = [len(ids) for ids in prompt_ids]
    check_prompt_fits(lengths, config.max_completion_length, context_limit(model, config.rollout.max_model_len), _where(config))
    conversations = split_messages(records, chat)
    prompts = [record["prompt"] for record in records]
    columns = select(data.columns, kept) if dropped else data.columns
    eval_set = _eval_set(config, tokenizer, tokenizer_name, model, tool_calling)
    longest = max(lengths + [len(ids) for ids in (eval_set.prompt_ids if eval_set else [])])
    sample_tokens = longest + config.max_completion_length
    if config.agent is not None or config.environment_factory is not None:  # a session, a prompt after reset:
        sample_tokens = context_limit(model, config.rollout.max_model_len) or sample_tokens  # the whole context
    conversational = chat or (eval_set is not None and eval_set.conversations is not None)
    reward_models.check(config, conversational, sample_tokens)
    judges.check(config, longest)
    ids = Ragged.of(prompt_ids, np.int32)
    checked = PromptSet(prompts, ids, columns, conversations, tool_calling, names, sources=sources, eval_set=eval_set)
    return Checked(model, tokenizer_name, tokenizer, checked, dropped, longest, template, pins)


def _eval_set(config: TrainConfig, tokenizer, tokenizer_name: str, model: str, tool_calling=None) -> EvalSet | None:
    """The held-out prompts, read, rendered and checked like the training prompts (none is dropped)."""
    from orchestrator.data.conversations import split_messages
    from orchestrator.models import check_prompt_fits, context_limit

    if config.eval_prompts is None:
        return None
    data = _eval_data(config)
    records, chat, prompt_ids, names = _rendered(data, config.eval_prompts, config, tokenizer, tokenizer_name, tool_calling)
    lengths = [len(ids) for ids in prompt_ids]
    check_prompt_fits(
        lengths, config.max_completion_length, context_limit(model, config.rollout.max_model_len), config.eval_prompts
    )
    conversations = split_messages(records, chat)
    texts = [record["prompt"] for record in records]
    return EvalSet(config.eval_prompts, texts, data.columns, conversations, prompt_ids, names)


def _canonical_tokenizer(config: TrainConfig, model: str, tokenizer_name: str, tokenizer_from: str | None):
    """(the canonical tokenizer, the chat_template's text), checked against the model and the stop ids. The
    model's own tokenizer is read at the model's pinned commit; another tokenizer is as named."""
    from orchestrator.data.conversations import read_chat_template
    from orchestrator.models import check_token_ids
    from workers.learner.model_setup import load_tokenizer

    template = read_chat_template(config.chat_template)
    revision = config.model_revision if tokenizer_from is None and tokenizer_name == model else None
    tokenizer = load_tokenizer(tokenizer_from or tokenizer_name, config.added_tokens, chat_template=template, revision=revision)
    _check_embedding_size(model, tokenizer, resized=bool(config.added_tokens))
    check_token_ids(config.stop_token_ids, tokenizer, "stop_token_ids")
    return tokenizer, template


def _rendered(data: PromptData, where: str, config: TrainConfig, tokenizer, tokenizer_name: str, tool_calling):
    """(records, whether they are conversations, their ids, their environments): conversations rendered by the
    chat template (with their environment's tools, under TRL's tool calling) and every prompt tokenized."""
    from orchestrator.data.conversations import render_records
    from orchestrator.environments import check_reset_arguments, environment_names

    names = environment_names(tool_calling, data.columns, len(data.prompts), where)
    check_reset_arguments(tool_calling, data.columns, where)
    records = [{"prompt": prompt} for prompt in data.prompts]
    records, chat = render_records(
        records, tokenizer, tokenizer_name, config.system_prompt, where, *_tool_rendering(tool_calling, names)
    )
    _check_conversational(tool_calling, chat, where)
    return records, chat, tokenize_prompts([record["prompt"] for record in records], tokenizer, chat), names


def _tool_rendering(tool_calling, names: list[str] | None) -> tuple[list[list[dict]] | None, str | None]:
    """What each prompt renders with TRL's tool calling: its environment's tool schemas, and the run's template."""
    if tool_calling is None:
        return None, None
    return [tool_calling.schemas[name] for name in names], tool_calling.chat_template


def _check_conversational(tool_calling, conversational: bool, where: str) -> None:
    if tool_calling is not None and not conversational:
        raise UserError(
            f"{where}: tools: [file.py:fn] and environment_factory call tools through the chat template, so the prompts "
            "must be conversations ({role, content} message lists), as in TRL"
        )


def _check_tools(config: TrainConfig) -> None:
    from workers.tools.runner import resolve

    for index, tool in enumerate(config.text_tools):
        resolve(tool.fn, key=f"tools[{index}].fn")
    if config.text_tools and config.skip_special_tokens:
        raise UserError(
            "skip_special_tokens: true would hide tool tags that are special tokens from the text the tool "
            "calls are read from; set skip_special_tokens: false when tools are configured"
        )


def _check_agent(config: TrainConfig, columns) -> None:
    """The agent's deadlines end before its group's, and its function exists, is `async def`, and takes
    (client, prompt, **this dataset's columns)."""
    import inspect

    from orchestrator.contracts import builtins, user_functions

    if config.agent is None:
        return
    agent, request_timeout_s = config.agent, config.rollout.request_timeout_s
    if agent.session_timeout_s + agent.call_timeout_s >= request_timeout_s:
        raise UserError(
            f"agent.session_timeout_s={agent.session_timeout_s:g} + agent.call_timeout_s={agent.call_timeout_s:g} must be "
            f"under rollout.request_timeout_s={request_timeout_s:g}: a group past request_timeout_s costs its engine (it "
            "is replaced), where a session past its own deadline only fails; lower the agent's deadlines or raise "
            "rollout.request_timeout_s"
        )
    spec = config.agent.fn
    fn = user_functions.resolve(spec, "agent.fn", builtins.AGENTS)
    if not inspect.iscoroutinefunction(fn):
        raise UserError(f"agent.fn: {spec!r} is not an async function; it is called as `await fn(client, prompt, **columns)`")
    parser = config.agent.tool_call_parser
    if parser is not None:
        from vllm.tool_parsers import ToolParserManager  # vLLM's registry of its parsers (names only; imports none)

        known = ToolParserManager.list_registered()
        if parser not in known:
            raise UserError(f"agent.tool_call_parser: vLLM has no tool-call parser {parser!r} (it has: {', '.join(known)})")
    names = [name for name in (columns[0] if columns else {}) if name != "prompt"]
    try:
        inspect.signature(fn).bind(None, None, **dict.fromkeys(names))
    except TypeError as error:
        raise UserError(
            f"agent.fn: {spec!r} cannot be called as fn(client, prompt, {', '.join(f'{n}=...' for n in names) or '**columns'}) "
            f"with this dataset's columns: {error}"
        ) from None


def _training_data(config: TrainConfig) -> tuple[PromptData, Sources | None]:
    """The training rows: of one source, or of several joined, with which rows each source holds."""
    if isinstance(config.prompts, str):
        return _source(config, config.prompt_sources[0], "prompts"), None
    data, rows = join([_source(config, source, f"prompts[{i}].source") for i, source in enumerate(config.prompts)])
    budgets = [source.max_completion_length for source in config.prompts]
    names, ratios = [source.label for source in config.prompts], [source.ratio for source in config.prompts]
    return data, Sources(names, ratios, rows, budgets if any(budgets) else None)


def _source(config: TrainConfig, source: PromptSource, key: str) -> PromptData:
    """The rows of one training source, as its settings (or the prompts_* keys) say, each in the source's
    environment if it names one. A reasoning_gym source is generated with its own seed (or the run's)."""
    if reasoning_gym.is_source(source.source):
        data = reasoning_gym.read(source.source, config.reasoning_gym, key, _gym_seed(config))
    else:
        split, subset = source.split or config.prompts_split, source.subset or config.prompts_subset
        data = _read(source.source, key, split, subset, source.column or config.prompts_column, config.prompts_revision)
    if source.environment is None:
        return data
    return PromptData(data.prompts, WithColumn(data.columns, "environment", source.environment))


def _eval_data(config: TrainConfig) -> PromptData:
    """The held-out rows: a reasoning_gym source generated with the seed + 1, or as eval_prompts_* say."""
    if reasoning_gym.is_source(config.eval_prompts):
        return reasoning_gym.read(config.eval_prompts, config.reasoning_gym, "eval_prompts", _gym_seed(config) + 1)
    return _read(
        config.eval_prompts, "eval_prompts", config.eval_prompts_split, config.eval_prompts_subset, config.eval_prompts_column
    )


def _where(config: TrainConfig) -> str:
    """The training prompts, as errors name them."""
    return config.prompts if isinstance(config.prompts, str) else "prompts (the sources joined, in order)"


def _gym_seed(config: TrainConfig) -> int:
    return config.seed if config.reasoning_gym.seed is None else config.reasoning_gym.seed


def _read(source: str, key: str, split: str, subset: str | None, column: str, revision: str | None = None) -> PromptData:
    """The prompts (and other columns) of a `prompts` or `eval_prompts` value: a built-in set, a file,
    or a dataset (a Hub name or a local dataset folder; data/hf_datasets.py)."""
    if source.startswith("builtin:"):
        from orchestrator.contracts import builtins, user_functions

        return PromptData.of_records(user_functions.resolve(source, key, builtins.PROMPTS)())
    return read_prompt_data(source, column, split, subset, key, revision)


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


def _check_prompt_lengths(prompt_ids: list[list[int]], config: TrainConfig) -> list[int]:
    """The prompts to train on, by index: those within max_prompt_length (drop_long_prompts), or all."""
    limit = config.max_prompt_length
    if limit is None:
        return list(range(len(prompt_ids)))
    kept = []
    for index, ids in enumerate(prompt_ids):
        if len(ids) <= limit:
            kept.append(index)
        elif not config.drop_long_prompts:
            raise UserError(
                f"prompt {index} ({_where(config)}) has {len(ids)} tokens, more than max_prompt_length={limit} "
                "(raise max_prompt_length, or set drop_long_prompts: true to skip such prompts)"
            )
    if not kept:
        raise UserError(f"every prompt is longer than max_prompt_length={limit}")
    return kept
