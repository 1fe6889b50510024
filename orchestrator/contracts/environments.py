"""TRL's tool calling and environments: plain Python functions and environment classes whose methods the
model calls through its chat template.

    tools: [my_tools.py:multiply]                  # TRL's `tools=[multiply]`
    environment_factory: my_env.py:Wordle          # TRL's `environment_factory=Wordle`
    environment_factory: {wordle: my_env.py:Wordle, math: my_env.py:Calculator}   # an `environment` column picks

A function's schema comes from its signature and docstring (transformers' `get_json_schema`, as TRL does);
the chat template renders the schemas into the prompt, the model's reply is parsed with the template's
response schema (TRL's `parse_response`), each call's result goes back as a `tool` message, and the loop
repeats up to `max_tool_calling_iterations`. An environment is one instance per sample in flight, reused
across groups through `reset(**columns)`; its public methods are the sample's tools, and its optional
`get_reward()` is one more reward, named after its class, with weight 1. The driver checks all of this
before Ray starts (orchestrator/environments.py); the engines' tool hosts hold the instances
(workers/environments/). Sent with every group, with the driver's copies of the files.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from pydantic import Field

from orchestrator.contracts.strict import StrictModel
from orchestrator.contracts.user_functions import UserFile

RESERVED = ("reset", "get_reward")  # an environment's methods that are not tools
SINGLE = ""  # the name of the one environment of `environment_factory: file.py:Class` (and of no environment)
ENVIRONMENT_REWARD = "environment:"  # reward_funcs entry of an environment's get_reward: environment:<Class>


class Environment(StrictModel):
    """One environment class, as preflight read it."""

    spec: str  # 'file.py:Class', 'module:Class' or 'builtin:NAME'
    class_name: str  # its reward's name (TRL's: the class name)
    owns_reward: bool  # it defines get_reward


class EnvironmentUse(StrictModel):
    """What the engines need to run a group's samples through the chat template's tool calling."""

    tools: list[str] = Field(default_factory=list)  # standalone tool functions (specs), for every sample
    environments: dict[str, Environment] = Field(default_factory=dict)  # by name; SINGLE for a lone factory
    schemas: dict[str, list[dict]]  # by environment name (SINGLE when none): the tool schemas its prompts render
    max_tool_calling_iterations: int | None = None  # TRL's: tool rounds per sample; None: until the budget
    call_timeout_s: float = Field(gt=0.0)  # one tool call's deadline; past it the call's result is an error
    chat_template: str | None = None  # TRL's training template when the model's is not prefix-preserving
    files: dict[str, UserFile] = Field(default_factory=dict)  # the tools' and environments' .py files


def reward_spec(class_name: str) -> str:
    """The reward_funcs entry that stands for an environment class's get_reward."""
    return f"{ENVIRONMENT_REWARD}{class_name}"


def tool_methods(cls: type) -> list[Callable]:
    """An environment class's tool functions, TRL's way: its public functions but `reset` and `get_reward`,
    in name order (`inspect.getmembers` on the class, which evaluates no property)."""
    return [
        function
        for name, function in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in RESERVED and not name.startswith("_")
    ]
