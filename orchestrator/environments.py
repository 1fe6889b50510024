"""The driver's side of TRL's tool calling and environments (contracts/environments.py): before Ray starts,
each tool function and environment class is imported, checked as TRL checks it, and turned into the tool
schemas its prompts render; the chat template is checked to render and parse tool calls. What it
builds (`EnvironmentUse`) travels with every group to the engines' tool hosts.

TRL's rules, kept: an environment's tools are its class's public functions other than `reset` and
`get_reward` (`inspect.getmembers` on the class, so in name order), after the standalone `tools`; a class
without `reset` is refused; a run needs a reward source (`reward_funcs`, or an environment with
`get_reward`); the chat template must render a whole tool-calling exchange (`supports_tool_calling`),
TRL must know how to parse its replies (`add_response_schema`), and a template that is not
prefix-preserving is replaced by TRL's training template for the run (`get_training_chat_template`).
Instances are never made here: the schemas come from the class's functions bound to the class itself.
"""

from __future__ import annotations

import copy
import inspect
import types
from collections.abc import Callable, Sequence

from orchestrator.contracts import builtins, user_functions
from orchestrator.contracts.environments import SINGLE, Environment, EnvironmentUse, reward_spec, tool_methods
from orchestrator.contracts.errors import UserError


def schema(fn: Callable, key: str) -> dict:
    """The JSON schema the chat template renders for `fn` (transformers' `get_json_schema`, what
    `apply_chat_template(tools=[fn])` uses); a function it cannot describe is refused by `key`."""
    from transformers.utils import get_json_schema

    try:
        return get_json_schema(fn)
    except Exception as error:  # transformers' DocstringParsingException and TypeHintParsingException
        where = f"{fn.__module__}.{fn.__qualname__}"
        raise UserError(
            f"{key}: cannot describe {where} as a tool: {error} (a tool needs type hints on every argument and a "
            "Google-style docstring with an Args: section, as TRL's tools do)"
        ) from None


def environment_class(spec: str, key: str) -> Environment:
    """The environment class `spec` names, checked: a class with `reset`."""
    cls = user_functions.resolve(spec, key, builtins.ENVIRONMENTS)
    if not inspect.isclass(cls):
        raise UserError(f"{key}: {spec!r} is not a class (environment_factory names the environment's class)")
    members = dict(inspect.getmembers(cls, predicate=inspect.isfunction))
    if "reset" not in members:
        raise UserError(f"{key}: {spec!r} has no reset method (each environment must define a callable `reset`, as in TRL)")
    return Environment(spec=spec, class_name=cls.__name__, owns_reward="get_reward" in members)


def factories(environment_factory: str | dict[str, str] | None) -> dict[str, str]:
    """`environment_factory` as {name: spec}; a lone spec is named SINGLE."""
    if environment_factory is None:
        return {}
    return dict(environment_factory) if isinstance(environment_factory, dict) else {SINGLE: environment_factory}


def environment_use(config, tokenizer) -> EnvironmentUse | None:
    """What the engines need for the run's TRL tools and environments (None: the run has neither), checked."""
    tools, specs = config.function_tools, factories(config.environment_factory)
    if not tools and not specs:
        return None
    check_template(tokenizer)
    standalone = [
        schema(user_functions.resolve(spec, f"tools[{i}]", builtins.TOOLS), f"tools[{i}]") for i, spec in enumerate(tools)
    ]
    environments, schemas = {}, {SINGLE: standalone} if not specs else {}
    for name, spec in specs.items():
        key = "environment_factory" + (f".{name}" if name != SINGLE else "")
        environments[name] = environment_class(spec, key)
        cls = user_functions.resolve(spec, key, builtins.ENVIRONMENTS)
        schemas[name] = standalone + [schema(types.MethodType(fn, cls), key) for fn in tool_methods(cls)]
    _check_class_names(environments)
    _check_reward_functions(list(config.reward_plan.specs))
    if not config.reward_plan.specs and not any(env.owns_reward for env in environments.values()):
        raise UserError(
            "No reward source provided: set reward_funcs, or give environment_factory an environment whose class "
            "defines a get_reward method (TRL's rule)"
        )
    return EnvironmentUse(
        tools=tools,
        environments=environments,
        schemas=schemas,
        max_tool_calling_iterations=config.max_tool_calling_iterations,
        call_timeout_s=config.tool_call_timeout_s,
        chat_template=training_template(tokenizer),
        files=user_functions.ship({**dict.fromkeys(tools, "tools"), **{spec: "environment_factory" for spec in specs.values()}}),
    )


def _check_class_names(environments: dict[str, Environment]) -> None:
    """Refuse two different classes of one name: each class's get_reward is the reward column named after it."""
    specs = {}
    for name, environment in environments.items():
        other = specs.setdefault(environment.class_name, (name, environment.spec))
        if other[1] != environment.spec:
            raise UserError(
                f"environment_factory.{name}: {environment.spec!r} and environment_factory.{other[0]} ({other[1]!r}) are "
                f"two classes named {environment.class_name}, and each class's get_reward is recorded as "
                f"rewards/{environment.class_name}: rename one"
            )


def _check_reward_functions(specs: list[str]) -> None:
    """Refuse a reward function that takes `environments`: TRL passes it the instances, which live on the
    rollout nodes here, away from the reward tasks."""
    from orchestrator.contracts.reward_models import is_model
    from orchestrator.rewards.functions import resolve

    for index, spec in enumerate(specs):
        if not is_model(spec) and "environments" in inspect.signature(resolve(spec)).parameters:
            raise UserError(
                f"reward_funcs[{index}]: {spec!r} takes `environments` (TRL passes it the environment instances), but "
                "the instances live on the rollout nodes here: score from the environment's state in its get_reward"
            )


def check_template(tokenizer) -> None:
    """Refuse a chat template that cannot render a tool-calling exchange, or whose replies TRL cannot parse."""
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    from workers.environments.chat import parses_responses

    if not supports_tool_calling(tokenizer):
        raise UserError(
            "chat_template: the tokenizer's chat template cannot render a tool-calling conversation (user -> assistant "
            "with tool_calls -> tool), which tools: [file.py:fn] and environment_factory need; use a tool-calling "
            "chat model's template (e.g. Qwen2.5's or Qwen3's)"
        )
    if not parses_responses(tokenizer):
        try:
            add_response_schema(copy.copy(tokenizer))  # a copy: the run's tokenizer is saved for the engines as it is
        except ValueError as error:
            raise UserError(f"chat_template: TRL cannot parse tool calls in this template's replies: {error}") from None


def training_template(tokenizer) -> str | None:
    """TRL's prefix-preserving training template for this tokenizer's, when its own is not (None: it is)."""
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    return None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)


def environment_names(use: EnvironmentUse | None, columns: Sequence[dict] | None, count: int, where: str) -> list[str] | None:
    """Each of `count` prompts' environment: the `environment` column with several environments (each value
    one of them), SINGLE for all with one or none; None without TRL's tool calling."""
    if use is None:
        return None
    if set(use.environments) <= {SINGLE}:
        return [SINGLE] * count
    if not columns or "environment" not in columns[0]:
        raise UserError(
            f"{where}: environment_factory names several environments ({', '.join(use.environments)}), so every prompt "
            "needs an 'environment' column naming its environment"
        )
    names = [row.get("environment") for row in columns]
    for index, name in enumerate(names):
        if name not in use.environments:
            raise UserError(
                f"{where}: prompt {index} has environment={name!r}, which is not among the environments of "
                f"environment_factory. Expected one of: {list(use.environments)}"
            )
    return names


def check_reset_arguments(use: EnvironmentUse | None, columns: Sequence[dict] | None, where: str) -> None:
    """Refuse an environment whose `reset` cannot take its prompts' rows (`prompt` and the other columns;
    with several environments, all but `environment`), before any engine starts."""
    if use is None:
        return
    row = ["prompt", *(columns[0] if columns else {})]
    for name, environment in use.environments.items():
        keys = [key for key in dict.fromkeys(row) if name == SINGLE or key != "environment"]
        cls = user_functions.resolve(environment.spec, "environment_factory", builtins.ENVIRONMENTS)
        try:
            inspect.signature(cls.reset).bind(None, **dict.fromkeys(keys))
        except TypeError as error:
            raise UserError(
                f"{where}: {environment.class_name}.reset cannot be called with this dataset's row ({', '.join(keys)}): {error}"
            ) from None


def reward_specs(use: EnvironmentUse | None) -> list[str]:
    """The reward_funcs entries the environments add: one per class that owns its reward (weight 1)."""
    if use is None:
        return []
    return list(dict.fromkeys(reward_spec(env.class_name) for env in use.environments.values() if env.owns_reward))
