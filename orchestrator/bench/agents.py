"""The lookup task two ways, side by side: the engine's own text-tag tool loop (configs/tools/lookup.yaml)
and the same task as an agent through the engines' OpenAI-compatible gateway (configs/agents/lookup.yaml).
Each is a `train` run of its shipped config in a process of its own, for the same number of steps; the
figures are its steady steps' (step 1 pays for first-request set-up)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
WAYS = {"tool loop": CONFIGS / "tools" / "lookup.yaml", "agent": CONFIGS / "agents" / "lookup.yaml"}


def measure(steps: int, out_dir: Path) -> dict:
    """{way: figures} for both ways, the agent's samples/s as a share of the tool loop's, and what one
    call costs through each layer (`per_call`)."""
    import asyncio

    figures = {way: _run(config, steps, out_dir / way.replace(" ", "-")) for way, config in WAYS.items()}
    figures["agent_vs_tool_loop"] = figures["agent"]["samples_per_s"] / figures["tool loop"]["samples_per_s"]
    figures["per_call_ms"] = asyncio.run(per_call(out_dir / "engine"))
    return figures


CALLS = 100  # per layer, one at a time


async def per_call(folder: Path) -> dict:
    """Milliseconds per model call (at most 8 tokens, one at a time, each a new session's first) of the
    lookup model's engine alone, of its gateway over HTTP, and of the gateway through the OpenAI client:
    what a call through the gateway adds. The engine and its gateway run in this process."""
    import time

    import httpx
    import openai

    from orchestrator.builtin import lookup_task
    from orchestrator.contracts.agents import AgentConfig, AgentUse
    from orchestrator.contracts.rollout import RolloutConfig
    from orchestrator.contracts.sampling import SamplingConfig
    from orchestrator.rollout.groups import make_groups
    from workers.rollout.engine import RolloutEngine

    model, tokenizer_dir = _lookup_engine_files(folder)
    import torch

    engine = RolloutEngine(0, model, tokenizer_dir, RolloutConfig(engines=1), "cuda" if torch.cuda.is_available() else "cpu")
    try:
        await engine.warm_up()
        gateway = await engine.started_gateway(AgentUse(config=AgentConfig(fn="builtin:lookup"), token="t"))
        prompt = lookup_task.prompt_for("apple")
        body = {"model": "policy", "messages": [{"role": "user", "content": prompt}], "max_tokens": 8}
        prompt_ids = engine.tokenizer()(prompt)["input_ids"]
        http = httpx.AsyncClient(headers={"Authorization": "Bearer t"})
        client = openai.AsyncOpenAI(base_url=gateway.url, api_key="t", max_retries=0)

        def session(i: int) -> str:
            gateway.open(f"s{i}", "t", SamplingConfig(max_tokens=8, seed=i), 0, i)
            return f"{gateway.url}/s/s{i}/v1"

        async def alone(i: int):
            await engine.generate(make_groups([prompt], [prompt_ids], 1, SamplingConfig(max_tokens=8, seed=i))[0])

        async def over_http(i: int):
            (await http.post(f"{session(i)}/chat/completions", json=body)).raise_for_status()

        async def openai_client(i: int):
            await client.with_options(base_url=session(i)).chat.completions.create(**body)

        figures = {}
        layers = {"engine alone": alone, "gateway over HTTP": over_http, "gateway through the OpenAI client": openai_client}
        for offset, (name, call) in enumerate(layers.items()):
            first = (offset + 1) * 10_000
            await call(first - 1)  # its first call pays for set-up
            began = time.perf_counter()
            for i in range(first, first + CALLS):
                await call(i)
            figures[name] = (time.perf_counter() - began) / CALLS * 1e3
        await http.aclose()
        await client.close()
        return figures
    finally:
        engine.shutdown()


def _lookup_engine_files(folder: Path) -> tuple[str, Path]:
    """The lookup model and a tokenizer folder with the agent config's chat template, as `train` ships them."""
    import shutil

    from orchestrator.data.conversations import read_chat_template
    from orchestrator.models import resolve_model
    from workers.learner.model_setup import load_tokenizer

    model, tokenizer_name = resolve_model("builtin:lookup", None)
    tokenizer = load_tokenizer(
        tokenizer_name, [], warn=False, chat_template=read_chat_template(str(CONFIGS / "agents" / "lookup.jinja"))
    )
    tokenizer.save_pretrained(folder)
    shutil.copyfile(Path(model) / "config.json", folder / "config.json")
    return model, folder


def _run(config: Path, steps: int, out: Path) -> dict:
    if not config.is_file():
        raise FileNotFoundError(f"{config}: bench --only agent runs the repository's shipped configs; run it from a checkout")
    command = [sys.executable, "-m", "orchestrator", "-q", "train", "--config", str(config), f"max_steps={steps}"]
    subprocess.run([*command, f"output_dir={out}", "plot_steps=1000000", "save_steps=0"], check=True)
    steady = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]
    return {
        # Sessions, not rows: a split agent session is several rows (neither way splits on this task).
        "samples_per_s": float(
            np.sum([m.get("agent/sessions", m["samples"]) for m in steady]) / np.sum([m["time/step"] for m in steady])
        ),
        "generate_s": float(np.mean([m["time/generate"] for m in steady])),
        "model_tokens_per_sample": float(np.mean([m["completion_length/mean"] for m in steady])),
        "reward_mean": float(np.mean([m["reward_mean"] for m in steady])),
        "steps": len(steady),
    }


def table(result: dict) -> str:
    rows = ["| way | samples/s | generation s/step | model tokens/sample | reward |", "|---|---|---|---|---|"]
    for way in WAYS:
        r = result[way]
        rows.append(
            f"| {way} | {r['samples_per_s']:.1f} | {r['generate_s']:.2f} | {r['model_tokens_per_sample']:.1f} | {r['reward_mean']:.3f} |"
        )
    rows.append(f"\nagent through the gateway: {result['agent_vs_tool_loop']:.2f}x the tool loop's samples/s")
    rows += ["", "| one call (at most 8 tokens), one at a time | ms |", "|---|---|"]
    rows += [f"| {name} | {ms:.1f} |" for name, ms in result["per_call_ms"].items()]
    return "\n".join(rows)
