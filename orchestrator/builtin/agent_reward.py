"""The reward an agent returned: `reward_funcs: [builtin:agent_reward]`, the default of a run with an `agent`."""

from __future__ import annotations


def agent_reward(prompts, completions, agent_reward: list[float | None], **kwargs) -> list[float | None]:
    """What each session's agent function returned (None: not scored by this function)."""
    return list(agent_reward)
