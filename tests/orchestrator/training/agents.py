"""Agents for the agent runs' tests (test_agent_run.py): each writes what it saw to the folder its
prompt's `record_dir` column names, one JSON line per event, keyed by its session."""

import asyncio
import json
import os
from pathlib import Path
from typing import Literal

import httpx
import openai

from orchestrator.builtin import lookup_task


def _session(client) -> str:
    return str(client.base_url).rstrip("/").split("/")[-2]  # .../s/SESSION/v1


def _write(record_dir: str, event: dict) -> None:
    with (Path(record_dir) / f"{event['session']}.jsonl").open("a") as out:
        out.write(json.dumps(event) + "\n")


_LATE: set = set()  # calls an agent leaves running after it returned (kept from the garbage collector)


async def recording_lookup(client, prompt: str, answer: str, record_dir: str, fault: str = "", **columns) -> float:
    """The lookup agent, asking to see what the gateway records of every call (prompt and sampled ids,
    logprobs); with `fault` 'kill' it ends its engine's process at once, with 'raise' or 'hang' it fails after its first call, with 'rewrite' its second call
    sends a rewritten history. It also tries the gateway without its session's token, another session of
    its group with its own token, and (a healthy one) its own session once it has returned."""
    session = _session(client)
    if fault == "kill":  # takes its engine's process down with it, every time
        os._exit(1)
    if fault == "raise first":
        raise ValueError("before any call")
    async with httpx.AsyncClient(trust_env=False) as raw:
        refused = await raw.get(f"{client.base_url}models")
        _write(record_dir, {"session": session, "kind": "no_token", "status": refused.status_code})
        other = await raw.get(f"{_sibling_url(client)}models", headers={"Authorization": f"Bearer {client.api_key}"})
        _write(record_dir, {"session": session, "kind": "other_session", "status": other.status_code})
    try:  # a field that would make the sampled distribution one the learner cannot score
        await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": prompt}], logit_bias={"5": 10})
    except openai.BadRequestError as error:
        _write(record_dir, {"session": session, "kind": "refused", "message": str(error)})
    messages = [{"role": "user", "content": prompt}]
    reply = await _ask(client, messages, record_dir, session)
    if fault == "raise":
        raise RuntimeError("the tool broke")
    if fault == "hang":
        await asyncio.sleep(3600)
    if fault == "rewrite":  # the history summarised: the second call does not extend the first
        messages = [{"role": "user", "content": "In short: " + prompt}]
        reply = await _ask(client, messages, record_dir, session)
    searched = lookup_task._SEARCH.search(reply)
    if searched is not None:
        messages += [{"role": "assistant", "content": reply}, {"role": "tool", "content": lookup_task.lookup(searched.group(1))}]
        reply = await _ask(client, messages, record_dir, session)
    final = lookup_task._FINAL_WORD.findall(reply)
    if fault == "":  # a call left running, made after this agent returned
        _LATE.add(task := asyncio.get_running_loop().create_task(_call_after_returning(client, prompt, record_dir, session)))
        task.add_done_callback(_LATE.discard)
    return 1.0 if final and final[-1] == answer else 0.0


def _sibling_url(client) -> str:
    """The base URL of another session of this one's group: keys are g{group}-s{sample}-{n}, with n counting
    up by one from the group's first sample."""
    base, key = str(client.base_url).rstrip("/").removesuffix("/v1").rsplit("/", 1)
    group, sample, n = key.split("-")
    index = int(sample[1:])
    other = 1 if index == 0 else 0
    return f"{base}/{group}-s{other}-{int(n) - index + other}/v1/"


async def _call_after_returning(client, prompt: str, record_dir: str, session: str) -> None:
    await asyncio.sleep(0.5)  # the session's agent returned meanwhile
    async with httpx.AsyncClient(trust_env=False) as raw:
        late = await raw.post(
            f"{client.base_url}chat/completions",
            headers={"Authorization": f"Bearer {client.api_key}"},
            json={"model": "policy", "messages": [{"role": "user", "content": prompt}]},
        )
    _write(record_dir, {"session": session, "kind": "after_return", "status": late.status_code})


async def kills_its_engine_once(client, prompt: str, answer: str, record_dir: str, **columns) -> float:
    """The lookup agent; the first session of the run (the one that creates record_dir/killed) first
    SIGKILLs vLLM's engine process of the engine it runs on (agents run in the engine's own process),
    then makes its call, and retries failed calls as a careful agent would."""
    import psutil

    marker = Path(record_dir) / "killed"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return await lookup_task.lookup_agent(client, prompt, answer)
    for process in psutil.Process().children(recursive=True):
        if "EngineCore" in " ".join(process.cmdline()):
            process.kill()
    while True:
        try:
            await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": prompt}])
        except openai.APIError:
            await asyncio.sleep(0.1)


async def _ask(client, messages, record_dir: str, session: str) -> str:
    extra = {**lookup_task.TAGS_IN_TEXT, "return_token_ids": True}
    response = await client.chat.completions.create(
        model="any-name", messages=messages, stop=[lookup_task.SEARCH_END], logprobs=True, extra_body=extra
    )
    choice = response.choices[0]
    _write(
        record_dir,
        {
            "session": session,
            "kind": "call",
            "prompt_token_ids": response.prompt_token_ids,
            "token_ids": choice.token_ids,
            "logprobs": [entry.logprob for entry in choice.logprobs.content],
        },
    )
    return choice.message.content or ""


async def agents_sdk(client, prompt: list, answer: str, record_dir: str, **columns) -> float:
    """An agent of the OpenAI Agents SDK, unchanged but for its client's base URL and key: its first
    model call must call the `lookup` tool (a function tool the SDK runs), the second answers."""
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    session = _session(client)

    @function_tool
    def lookup(topic: Literal["apple", "river"]) -> str:
        """The code of a topic."""
        _write(record_dir, {"session": session, "kind": "tool", "topic": topic})
        return lookup_task.CODES[topic]

    own_client = AsyncOpenAI(base_url=str(client.base_url), api_key=client.api_key)
    model = OpenAIChatCompletionsModel(model="tiny-chat", openai_client=own_client)
    agent = Agent(name="calculator", model=model, tools=[lookup], model_settings=ModelSettings(tool_choice="lookup"))
    result = await Runner.run(agent, prompt[-1]["content"], max_turns=2)
    _write(record_dir, {"session": session, "kind": "final", "output": str(result.final_output)})
    return 1.0 if answer in str(result.final_output) else 0.0
