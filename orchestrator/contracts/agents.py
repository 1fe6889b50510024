"""Agents: a user's program that talks to the model through an OpenAI client, one session per sample.

`agent: {fn: path/to/agent.py:name}` in the run config. For every sample the engine opens a session on
its gateway (workers/agents/gateway.py) and calls `await fn(client, prompt, **columns)` with an
`openai.AsyncOpenAI` bound to that session; every model call of the session is recorded there, token
for token, and the calls become the sample (workers/agents/trajectory.py). Sent with every group to the
engines, with the driver's copy of the agent's file (contracts/user_functions.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.contracts.paths import SPEC
from orchestrator.contracts.strict import StrictModel
from orchestrator.contracts.user_functions import UserFile


class AgentConfig(StrictModel):
    fn: str = Field(
        description="`async def fn(client, prompt, **columns)`: 'path/file.py:name', 'package.module:name' or "
        "'builtin:NAME'. `client` is an `openai.AsyncOpenAI` bound to this sample's session (its `base_url` and "
        "`api_key` also work for any framework on top of the OpenAI client), `prompt` the dataset's prompt (text or "
        "messages), `columns` the dataset's other columns. Returns the sample's reward (a number), or None to leave "
        "scoring to `reward_funcs`.",
        json_schema_extra=SPEC,
    )
    session_timeout_s: float = Field(
        300.0, gt=0.0, description="Deadline of one session (one call of `fn`); past it the session fails."
    )
    call_timeout_s: float = Field(
        120.0, gt=0.0, description="Deadline of one model call; past it the call is aborted and answered with an error."
    )
    max_calls: int = Field(16, ge=1, description="Model calls one session may make; a call past it is refused.")
    tool_call_parser: str | None = Field(
        None,
        description="vLLM's tool-call parser for the model family ('hermes' for Qwen2.5-style templates, "
        "'llama3_json', ...): requests with `tools=[...]` get parsed `tool_calls` back. None: requests with tools are "
        "refused.",
    )
    on_prefix_mismatch: Literal["split", "last", "error"] = Field(
        "split",
        description="When a call's messages do not extend the session's earlier context token for token (the agent "
        "rewrote its history, e.g. summarised or dropped earlier turns): 'split' makes each part of the session (a "
        "segment) a sample of its own, at the session's place in its group, each with the session's reward and "
        "advantage; 'last' trains on the last segment only; 'error' fails the session. Every such call is counted in "
        "`agent/prefix_mismatches`.",
    )
    host: str | None = Field(
        None,
        description="Address the engines' gateways listen on; None: loopback (127.0.0.1), since the agents run in "
        "their engine's own process. Set a node address only for agents that call from elsewhere (docs: Security). "
        "Every request must carry its session's own token (`Authorization: Bearer ...`, the client's api_key).",
    )
    max_request_bytes: int = Field(
        8 << 20,
        ge=1024,
        description="Largest request body the gateway reads; a larger one is refused (413) before it is read whole.",
    )


class AgentUse(StrictModel):
    """What the engines need to run agent sessions; built from the run config."""

    config: AgentConfig
    files: dict[str, UserFile] = Field(default_factory=dict)  # the agent's .py file, as the driver read it
