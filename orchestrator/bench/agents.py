"""The lookup task two ways, side by side: the engine's own text-tag tool loop (configs/tools/lookup.yaml)
and the same task as an agent through the engines' OpenAI-compatible gateway (configs/agents/lookup.yaml).
Each is a `train` run of its shipped config in a process of its own, for the same number of steps; the
figures are its steady steps' (step 1 pays for first-request set-up).

Both ways run on two models pre-trained on the task: the shipped lookup model (0.16M parameters), where
a model call costs the engine a couple of milliseconds, so the gateway's fixed cost per call (HTTP, the
OpenAI client, vLLM's chat serving) is about half a step; and one of the bench model's size (hidden 512, 6
layers, 21M parameters, as in the fixed and realistic cases), where model calls and the learner's step
cost what a small real model's do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from orchestrator.builtin.tiny_model import TinyModelSpec, tiny_model

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
WAYS = {"tool loop": CONFIGS / "tools" / "lookup.yaml", "agent": CONFIGS / "agents" / "lookup.yaml"}
# The bench model's shape, pre-trained on the lookup corpus (about 10 minutes on one core, once; cached).
BENCH_SIZE = TinyModelSpec(task="lookup", hidden_size=512, intermediate_size=1536, num_layers=6, num_heads=8, learning_rate=5e-4)
BENCH_SIZE_LEARNING_RATE = 1e-4  # the configs' 1e-3 is the tiny model's; at this size it collapses the policy after one step
MODELS = ("lookup model", "bench size")


def measure(steps: int, out_dir: Path) -> dict:
    """{model: {way: figures, agent_vs_tool_loop}} for both models, and what one call costs through each
    layer on the lookup model (`per_call_ms`)."""
    import asyncio

    figures = {}
    for model in MODELS:
        overrides = _overrides(model)
        folder = out_dir / model.replace(" ", "-")
        ways = {way: _run(config, steps, folder / way.replace(" ", "-"), overrides) for way, config in WAYS.items()}
        figures[model] = {**ways, "agent_vs_tool_loop": ways["agent"]["samples_per_s"] / ways["tool loop"]["samples_per_s"]}
    figures["per_call_ms"] = asyncio.run(per_call(out_dir / "engine"))
    return figures


def _overrides(model: str) -> list[str]:
    """What the shipped configs' command line changes for `model` (nothing for the lookup model)."""
    if model == "lookup model":
        return []
    built = tiny_model(BENCH_SIZE)
    return [f"model={built.model_dir}", f"tokenizer={built.tokenizer_dir}", f"learning_rate={BENCH_SIZE_LEARNING_RATE}"]


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
        gateway = await engine.started_gateway(AgentUse(config=AgentConfig(fn="builtin:lookup")))
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


def _run(config: Path, steps: int, out: Path, overrides: list[str]) -> dict:
    if not config.is_file():
        raise FileNotFoundError(f"{config}: bench --only agent runs the repository's shipped configs; run it from a checkout")
    command = [sys.executable, "-m", "orchestrator", "-q", "train", "--config", str(config), f"max_steps={steps}"]
    subprocess.run([*command, *overrides, f"output_dir={out}", "plot_steps=1000000", "save_steps=0"], check=True)
    steady = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]
    return {
        # Sessions, not rows: a split agent session is several rows (neither way splits on this task).
        "samples_per_s": float(
            np.sum([m.get("agent/sessions", m["samples"]) for m in steady]) / np.sum([m["time/step"] for m in steady])
        ),
        "generate_s": float(np.mean([m["time/generate"] for m in steady])),
        "step_s": float(np.mean([m["time/step"] for m in steady])),
        "model_tokens_per_sample": float(np.mean([m["completion_length/mean"] for m in steady])),
        "reward_mean": float(np.mean([m["reward_mean"] for m in steady])),
        "steps": len(steady),
    }


def table(result: dict) -> str:
    rows = [
        "| model | way | samples/s | generation s/step | step s | model tokens/sample | reward |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in MODELS:
        for way in WAYS:
            r = result[name][way]
            rows.append(
                f"| {name} | {way} | {r['samples_per_s']:.1f} | {r['generate_s']:.2f} | {r['step_s']:.2f} "
                f"| {r['model_tokens_per_sample']:.1f} | {r['reward_mean']:.3f} |"
            )
    rows.append("")
    rows += [
        f"agent through the gateway, {name}: {result[name]['agent_vs_tool_loop']:.2f}x the tool loop's samples/s"
        for name in MODELS
    ]
    rows += ["", "| one call on the lookup model (at most 8 tokens), one at a time | ms |", "|---|---|"]
    rows += [f"| {name} | {ms:.1f} |" for name, ms in result["per_call_ms"].items()]
    return "\n".join(rows)
