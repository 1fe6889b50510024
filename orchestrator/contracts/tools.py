"""Tools the model may call mid-sample: the call pattern, the Python function, and the turn budget.

A tool call is the text between a tool's `begin` and `end` tags, e.g. `<search> apple </search>`.
Generation stops at `end`; the tool's result goes back to the model as observation tokens wrapped in
`result_begin`/`result_end`, and generation continues. Sent with every group to the engines, with
the driver's copy of the tools' files (contracts/user_functions.py): what the tool host loads.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from orchestrator.contracts.paths import SPEC
from orchestrator.contracts.strict import StrictModel
from orchestrator.contracts.user_functions import UserFile


class ToolConfig(StrictModel):
    name: str = Field(description="Name in metrics and in the rollout Parquet's tool_calls.")
    fn: str = Field(
        description="`fn(call_text: str, **context) -> str`: 'path/file.py:name', 'package.module:name' or 'builtin:NAME'. "
        "context: prompt, group_id, sample_index, turn.",
        json_schema_extra=SPEC,
    )
    begin: str = Field(description="Tag that opens a call, e.g. '<search>'.")
    end: str = Field(description="Tag that closes a call, e.g. '</search>'; generation stops there and the tool runs.")
    timeout_s: float = Field(10.0, gt=0.0, description="Per-call deadline; past it the call yields the error observation.")
    result_begin: str = Field("<result>", description="Opens the observation appended after a call.")
    result_end: str = Field("</result>", description="Closes the observation.")

    @model_validator(mode="after")
    def _check(self) -> ToolConfig:
        for key in ("begin", "end", "result_begin", "result_end"):
            if not getattr(self, key):
                raise ValueError(f"tool {self.name!r}: {key} must not be empty")
        if self.begin == self.end:
            raise ValueError(f"tool {self.name!r}: begin and end are both {self.begin!r}; a call needs two different tags")
        return self


class ToolUse(StrictModel):
    """What the engines need to run multi-turn samples; built from the run config."""

    tools: list[ToolConfig]
    max_turns: int = Field(ge=1)
    max_observation_tokens: int = Field(ge=1)
    error_observation: str
    files: dict[str, UserFile] = Field(default_factory=dict)  # the tools' .py files by path, as the driver read them
