"""Every `builtin:NAME` a config can name, by kind, in one registry.

Each entry points at the function it stands for (`module:function`), resolved like a user's own
(user_functions.py), so a built-in is read the same way a user's file is. The functions live in
orchestrator/builtin/; both the driver and the actors (the tool host) read this table.
"""

from __future__ import annotations

REWARDS = {  # reward_funcs
    "search_call": "orchestrator.builtin.search_task:search_call_reward",
    "summary_length": "orchestrator.builtin.length_reward:summary_length",
    "exact_code": "orchestrator.builtin.lookup_task:exact_code_reward",
    "math_answer": "orchestrator.builtin.math_answer:math_answer_reward",
    "agent_reward": "orchestrator.builtin.agent_reward:agent_reward",
    "reasoning_gym": "orchestrator.builtin.reasoning_gym_answer:reasoning_gym_reward",
}

AGENTS = {  # agent.fn
    "lookup": "orchestrator.builtin.lookup_task:lookup_agent",
}

TOOLS = {  # tools[].fn
    "lookup": "orchestrator.builtin.lookup_task:lookup",
}

ENVIRONMENTS = {  # environment_factory: classes
    "lookup": "orchestrator.builtin.lookup_environment:LookupEnvironment",
}

PROMPTS = {  # prompts, eval_prompts: functions returning records ({"prompt": ..., other columns})
    "search": "orchestrator.builtin.search_task:records",
    "lookup": "orchestrator.builtin.lookup_task:records",
    "arithmetic": "orchestrator.builtin.arithmetic_task:records",
    "arithmetic_eval": "orchestrator.builtin.arithmetic_task:eval_records",
    "lookup_environment": "orchestrator.builtin.lookup_environment:records",
    "reset": "orchestrator.builtin.reset_prompts:records",
}

MODELS = ("search", "lookup", "chat", "tool-chat", "reasoning-chat")  # model: tiny models built locally (orchestrator/models.py)
