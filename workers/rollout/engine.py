"""One vLLM engine that generates groups: where every sample is born.

A plain class (no Ray in it) around vLLM's `AsyncLLM`: continuous batching across all groups in
flight. The learner's weights arrive through `weights` (workers/weights/receiving.py), which pauses
generation for each load; a load that fails part-way never resumes, and the engine then refuses to
generate. It is built with the canonical tokenizer from a
folder the caller wrote, and it reports the fingerprint of the tokenizer vLLM really loaded. When that
folder holds PEFT's adapter_config.json (a LoRA run) it starts with vLLM's LoRA support on and serves
every request with the adapter the learner sent last (workers/weights/adapters.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import itertools
import json
import os
import secrets
from collections.abc import Awaitable
from pathlib import Path
from typing import Literal

from orchestrator.contracts import builtins, user_functions
from orchestrator.contracts.agents import AgentUse
from orchestrator.contracts.engine_death import GroupTimeoutError
from orchestrator.contracts.fingerprint import TokenizerFingerprint, fingerprint
from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.contracts.tools import ToolUse
from workers.environments.chat import Chat, with_observation
from workers.environments.chat_loop import run_chat_sample
from workers.environments.leases import EnvironmentFailed
from workers.rollout.continuation import ABORTED, joined, tokens_left, unfinished
from workers.rollout.multi_turn import CallTool, Turn, Vocabulary, run_sample
from workers.rollout.sampling import cache_salt, continue_params, to_samples, to_turn, turn_params, turn_seed, vllm_params
from workers.weights import adapters
from workers.weights.receiving import EngineWeights

Device = Literal["cpu", "cuda"]
CPU_KV_CACHE_BYTES = 256 << 20
LOOPBACK = "127.0.0.1"
CONTINUED_TURN = 1_000  # seeds of a sample continued after its n-th hand-back: as of turn n * this
ENGINE_CHECK_S = 0.5  # how often agent groups look whether vLLM's engine process is still alive
HOST_SLACK_S = 30.0  # beyond a tool call's own deadline: how long the tool host may take to answer at all


# vLLM's accepted `max_lora_rank` values (vllm/config/lora.py: MaxLoRARanks).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def engine_args(
    model: str,
    tokenizer_dir: Path,
    config: RolloutConfig,
    device: Device,
    seed: int,
    placeholder_weights: bool = False,
    lora_rank: int | None = None,
):
    """The vLLM engine arguments for one rollout engine on `device`. With `placeholder_weights`
    the engine starts from the model config alone and must be sent weights before it serves; with
    `lora_rank` it serves one LoRA adapter of at most that rank (vLLM's `max_lora_rank`)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    on_cpu = device == "cpu"
    dtype = config.weight_dtype(device) or "auto"
    kv_bytes = config.kv_cache_memory_bytes or (CPU_KV_CACHE_BYTES if on_cpu else None)
    return AsyncEngineArgs(
        model=model,
        tokenizer=str(tokenizer_dir),
        dtype=dtype,
        seed=seed,
        max_model_len=config.max_model_len,
        kv_cache_memory_bytes=kv_bytes,
        gpu_memory_utilization=config.gpu_memory_utilization,
        tensor_parallel_size=config.tensor_parallel_size,
        # The actor holds all of the engine's GPUs in one placement bundle (orchestrator/placement), so
        # its tensor-parallel workers are processes that see them; left to itself, vLLM would pick Ray
        # workers inside the actor's placement group, which has no bundle left for them.
        distributed_executor_backend="mp" if config.tensor_parallel_size > 1 else None,
        max_num_seqs=config.max_inflight_samples,  # never schedule more than the KV cache was sized for
        # On CPU a prompt is never prefilled in chunks: vLLM 0.32 discards the token it samples after a partial
        # prefill and rewinds that request's generator (gpu_model_runner.py:3502, `gen.set_offset`), which only
        # CUDA generators can do, so a seeded request whose prefill was cut at the step's token budget (an engine
        # handed more prompt tokens than `max_num_batched_tokens` at once) killed the engine ("CPU Generator does
        # not use offset"). Without chunking, vLLM admits whole prompts while they fit the budget (raised to the
        # context if smaller) and the rest wait a step; a preempted request comes back as one whole prefill too.
        enable_chunked_prefill=False if on_cpu else None,
        logprobs_mode="processed_logprobs",  # logprobs of the distribution actually sampled
        enforce_eager=on_cpu if config.enforce_eager is None else config.enforce_eager,
        disable_log_stats=True,
        load_format="dummy" if placeholder_weights else "auto",
        worker_extension_cls="workers.weights.vllm_worker.WeightReceiver",
        # The collective weight path (workers/weights/nccl.py): NCCL on GPU, opened with a deadline
        # (workers/weights/timed_nccl.py), its stand-in gloo on CPU.
        weight_transfer_config={"backend": "gloo" if on_cpu else "nccl_timed"},
        **({"enable_lora": True, "max_lora_rank": lora_rank, "max_loras": 1} if lora_rank else {}),
    )


def warm_up_params() -> list:
    """The warm-up's sampling: a group's own parameters (`vllm_params`: seeded, several samples, the sampled
    token's processed log-prob, all at once), plain and with top-p and top-k masking."""
    plain = SamplingConfig(max_tokens=2, ignore_eos=True, seed=0)
    masked = plain.model_copy(update={"top_p": 0.9, "top_k": 8})
    return [vllm_params(sampling, n=2, group_id=0) for sampling in (plain, masked)]


def engine_environment(config: RolloutConfig, device: Device) -> dict[str, str]:
    """What the engine's process environment must say before vLLM starts its engine process:
    - CPU: the cores its threads bind to (`rollout.cpu_threads_bind`);
    - CUDA, float32 weights: `TRITON_F32_DEFAULT=ieee`. vLLM's Triton attention (its only float32 backend on
      CUDA) runs `tl.dot` in TF32 otherwise, and the engines' log-probs drift from a float32 learner's by
      ~2-4e-4 mean, ~5e-3 max (expected from a read of vLLM 0.32; CPU engines: ~3e-7);
    - CUDA, `rollout.vllm_v1_runner`: `VLLM_USE_V2_MODEL_RUNNER=0`, vLLM's V1 model runner, which every engine
      path of the suite has run (vLLM 0.32 picks V2 on CUDA; V1 on CPU)."""
    if device == "cpu":
        return {} if config.cpu_threads_bind is None else {"VLLM_CPU_OMP_THREADS_BIND": config.cpu_threads_bind}
    environment = {}
    if config.weight_dtype(device) == "float32":
        environment["TRITON_F32_DEFAULT"] = "ieee"
    if config.vllm_v1_runner:
        environment["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    return environment


def max_lora_rank(config: RolloutConfig, rank: int) -> int:
    """The engines' `max_lora_rank` for an adapter of rank `rank`: `rollout.max_lora_rank`, or the
    smallest value vLLM accepts that holds it."""
    if config.max_lora_rank is not None:
        return config.max_lora_rank
    return next(allowed for allowed in LORA_RANKS if allowed >= rank)


async def while_alive(llm, work: Awaitable, every_s: float = ENGINE_CHECK_S):
    """`work`'s result, unless vLLM's engine process (`llm`: its `AsyncLLM`) dies before or as it ends: then
    vLLM's `EngineDeadError`, so that the pool replaces the engine and sends the group elsewhere. Agent groups
    need this: their model calls go through the gateway, which answers a dead engine with an error each
    session's agent sees, so the sessions would end as the agent's own failures (scored `reward_error_score`,
    or stopping the run), or, for an agent that retries, only at `agent.session_timeout_s`."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_retrieved)
    try:
        while not task.done() and not llm.errored:
            await asyncio.wait({task}, timeout=every_s)
    finally:
        if not task.done():  # the engine died, or the group itself was cancelled: the sessions stop too
            task.cancel()
    if llm.errored:
        await asyncio.gather(task, return_exceptions=True)
        raise llm.dead_error
    return task.result()


def _retrieved(future: asyncio.Future) -> None:
    """Reads a finished future's error: a cancelled `asyncio.gather` holds its CancelledError as one, which
    nobody awaits once its group was cancelled (asyncio would log it as never retrieved)."""
    if not future.cancelled():
        future.exception()


@dataclasses.dataclass
class _Requests:
    """One running group's vLLM requests (to abort them) and whether the engine handed the group back."""

    ids: list[str] = dataclasses.field(default_factory=list)
    handed_back: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


async def _unless_handed_back(work: Awaitable, requests: _Requests):
    """`work`'s result, or None once the group is handed back first (`work` is then cancelled)."""
    task, stop = asyncio.ensure_future(work), asyncio.ensure_future(requests.handed_back.wait())
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


def _not_begun(sample_index: int) -> Sample:
    """A sample of a group handed back before it generated anything for it."""
    return Sample(sample_index, "", [], [], ABORTED, None, None, output_versions=[])


async def _kept(sample: Sample) -> Sample:
    return sample


class RolloutEngine:
    def __init__(
        self,
        engine_id: int,
        model: str,
        tokenizer_dir: Path,
        config: RolloutConfig,
        device: Device,
        seed: int = 0,
        placeholder_weights: bool = False,
        call_tool: CallTool | None = None,
    ):
        """`call_tool` runs tool calls of multi-turn groups (the actor passes a Ray-task runner)."""
        from vllm.v1.engine.async_llm import AsyncLLM

        self.engine_id = engine_id
        self.config = config
        self._request_ids = itertools.count()
        self._running: dict[int, _Requests] = {}  # group id -> its requests, while it generates
        self._call_tool = call_tool
        self._tokenizer_dir = tokenizer_dir
        self._chats: dict[str | None, Chat] = {}  # by chat template: TRL's tool calling (workers/environments/chat.py)
        self._gateway = None  # started by the first agent group
        self._gateway_start = asyncio.Lock()
        self._agents = None
        # A LoRA run's bundle holds PEFT's adapter_config.json: the engine serves the adapter the learner sends.
        adapter_file = tokenizer_dir / adapters.ADAPTER_CONFIG
        adapter_config = json.loads(adapter_file.read_text()) if adapter_file.is_file() else None
        rank = max_lora_rank(config, adapter_config["r"]) if adapter_config else None
        os.environ.update(engine_environment(config, device))  # read by vLLM's engine process as it starts
        self._llm = AsyncLLM.from_engine_args(
            engine_args(model, tokenizer_dir, config, device, seed, placeholder_weights, lora_rank=rank)
        )
        self.weights = EngineWeights(
            engine_id,
            self._llm,
            config.tensor_parallel_size,
            adapter_config,
            tokenizer_dir / "adapter",
            keep_kv_cache=config.kv_cache_after_update == "keep",
        )  # the learner's weights arrive through it (workers/weights/receiving.py)
        tokenizer = self._llm.get_tokenizer()
        self._eos_id = tokenizer.eos_token_id
        self._eos_text = tokenizer.eos_token

    async def warm_up(self) -> None:
        """Short requests of the shapes a run's groups take (`warm_up_params`), so the first real group does not pay
        for kernel set-up inside the health check's clock (on CUDA the sampler's Triton kernels compile per shape:
        log-probs, a seed, several samples, top-p/top-k); then what the process holds
        from start-up (vLLM, torch, the tokenizer: millions of objects, here for good) is frozen out of the cycle
        collector, as vLLM's own API server does: its full collections walked all of it with the GIL held (0.4 s
        every third agent step of the lookup task, while the gateway and vLLM's outputs waited). Frozen objects
        are still freed by reference counting; one alive now that later dies in a reference cycle is kept until
        shutdown. What comes later (weight loads, adapters, the gateway, requests) stays in the collector's care."""

        async def one(index: int, params) -> None:
            prompt = {"prompt_token_ids": [self._eos_id or 0]}
            async for _ in self._llm.generate(prompt, params, f"e{self.engine_id}-warm-up-{index}"):
                pass

        await asyncio.gather(*(one(index, params) for index, params in enumerate(warm_up_params())))
        # vLLM stamps every sampled token with its weights' label (output_versions): the weights it started
        # with are policy version 0 (every later load labels its own version: workers/weights/receiving.py)
        await self._llm.update_weight_version(str(self.weights.policy_version))
        gc.collect()
        gc.freeze()

    def tokenizer(self):
        """The tokenizer vLLM loaded: the canonical one."""
        return self._llm.get_tokenizer()

    def tokenizer_fingerprint(self) -> TokenizerFingerprint:
        return fingerprint(self._llm.get_tokenizer())

    async def generate(self, request: GroupRequest) -> GroupResult:
        """All `num_generations` samples of one group, stamped with the policy that made them; a group handed
        back (`hand_back`) returns with the samples it has so far, those unfinished cut short ("abort"), and a
        group given with its `progress` continues them (continuation.py). Raises `WeightLoadFailedError` once a
        weight load failed part-way (before or while it runs)."""
        self.weights.loads.check()
        version = self.weights.policy_version
        if request.progress is not None:
            version = min(version, request.progress.policy_version)
        requests = self._running[request.group_id] = _Requests()
        if request.agent:
            work = self._agent_samples(request, requests)
        elif request.environment:
            work = self._environment_samples(request, requests)
        elif request.tools:
            work = self._tool_samples(request, requests)
        elif request.progress is not None:
            work = self._continued_samples(request, requests)
        else:
            work = self._samples(request, requests)
        try:
            samples = await asyncio.wait_for(self.weights.loads.unless_failed(work), self.config.request_timeout_s)
        except TimeoutError:
            await self._llm.abort(requests.ids)
            raise GroupTimeoutError(
                f"engine {self.engine_id}: group {request.group_id} did not finish within "
                f"rollout.request_timeout_s={self.config.request_timeout_s}s",
                request.group_id,
            ) from None
        finally:
            if self._running.get(request.group_id) is requests:
                del self._running[request.group_id]
        return GroupResult(group_id=request.group_id, engine_id=self.engine_id, policy_version=version, samples=samples)

    async def hand_back(self) -> None:
        """Stop the running groups now (this engine stops serving: a drain, a scale-down): their vLLM requests
        are aborted and each group returns at once with what it has (`generate`), to continue elsewhere."""
        for requests in self._running.values():
            requests.handed_back.set()
        await self._llm.abort([request_id for requests in self._running.values() for request_id in requests.ids])

    async def _samples(self, request: GroupRequest, requests: _Requests) -> list[Sample]:
        """Single-turn: one vLLM request with n = num_generations."""
        params = vllm_params(request.sampling, request.num_generations, request.group_id)
        final = await self._final_output(request.prompt_ids, params, f"g{request.group_id}", requests)
        if final is None:
            return [_not_begun(index) for index in range(request.num_generations)]
        return to_samples(final.outputs, self._eos_id, self._eos_text, request.sampling.top_logprobs)

    async def _continued_samples(self, request: GroupRequest, requests: _Requests) -> list[Sample]:
        """Single-turn, handed back unfinished: each sample cut short goes on from its last token, with what is
        left of its budget; those that finished are kept as they are."""
        sampling, progress = request.sampling, request.progress
        decode = functools.partial(self.tokenizer().decode, skip_special_tokens=sampling.skip_special_tokens)

        async def one(head: Sample) -> Sample:
            if not unfinished(head):
                return head
            left = tokens_left(head, sampling.max_tokens)
            if not left:  # cut short at its last token: nothing is left to generate
                return dataclasses.replace(head, finish_reason="length")
            seed = turn_seed(sampling, request.group_id, head.sample_index, CONTINUED_TURN + progress.handed_back)
            name = f"g{request.group_id}-s{head.sample_index}-c{progress.handed_back}"
            final = await self._final_output(
                request.prompt_ids + head.completion_ids, continue_params(sampling, left, seed), name, requests
            )
            if final is None:
                return head
            tail = to_samples(final.outputs, self._eos_id, self._eos_text, sampling.top_logprobs)[0]
            eos = (self._eos_id, self._eos_text)
            return joined(head, tail, decode, eos, list(sampling.stop), sampling.include_stop_str_in_output)

        return list(await asyncio.gather(*(one(head) for head in progress.samples)))

    async def _tool_samples(self, request: GroupRequest, requests: _Requests) -> list[Sample]:
        """Multi-turn: every sample runs its own generate -> tool -> continue loop, all concurrently; a group
        handed back unfinished resumes each unfinished sample's loop where it stopped (multi_turn.py)."""
        use = request.tools
        vocabulary = self._vocabulary(use)
        handed_back = request.progress.handed_back if request.progress is not None else 0

        def generate_turn(sample_index: int):
            async def turn(context_ids: list[int], max_tokens: int, turn_index: int):
                seed = turn_seed(request.sampling, request.group_id, sample_index, turn_index + CONTINUED_TURN * handed_back)
                params = turn_params(request.sampling, use, max_tokens, seed, list(vocabulary.end_tag_ids))
                name = f"g{request.group_id}-s{sample_index}-t{turn_index}-c{handed_back}"
                final = await self._final_output(context_ids, params, name, requests)
                return to_turn(final.outputs[0]) if final is not None else Turn([], "", [], ABORTED, None, [])

            return turn

        context = {"prompt": request.prompt, "group_id": request.group_id}
        heads = request.progress.samples if request.progress is not None else [None] * request.num_generations
        run = functools.partial(run_sample, budget=request.sampling.max_tokens, use=use, vocabulary=vocabulary)
        samples = [
            asyncio.ensure_future(
                run(
                    i, request.prompt_ids, generate_turn=generate_turn(i), call_tool=self._call_tool, context=context, resume=head
                )
            )
            if head is None or unfinished(head)
            else asyncio.ensure_future(_kept(head))
            for i, head in enumerate(heads)
        ]
        try:
            return list(await asyncio.gather(*samples))
        except BaseException:  # one sample failed: its siblings' requests and tool calls stop too
            for sample in samples:
                sample.cancel()
            raise

    async def _agent_samples(self, request: GroupRequest, requests: _Requests) -> list[Sample]:
        """Agent groups: the user's function runs one session per sample (workers/agents/), all at once;
        each session's recorded calls become its sample, or one per segment when its history was rewritten.
        Handed back, the sessions stop and the group returns with no sample begun: a session's state lives in
        the user's code, so it starts again elsewhere."""
        from workers.agents.trajectory import session_samples

        use = request.agent
        gateway = await self.started_gateway(use)
        fn = user_functions.resolve(use.config.fn, "agent.fn", builtins.AGENTS, use.files)
        keys = [f"g{request.group_id}-s{index}-{next(self._request_ids)}" for index in range(request.num_generations)]
        # Each session has a secret of its own: an agent holds its own session's token, and no other session's.
        tokens = [secrets.token_urlsafe(24) for _ in keys]
        sessions = [
            gateway.open(key, token, request.sampling, request.group_id, i) for i, (key, token) in enumerate(zip(keys, tokens))
        ]
        timeouts = (use.config.session_timeout_s, use.config.call_timeout_s)

        async def session(key: str, token: str):
            try:
                return await self._agents.session(fn, f"{gateway.url}/s/{key}/v1", token, request.inputs, key, timeouts)
            finally:
                gateway.close(key)  # its agent is done: a later call (a task it left behind) is refused, never recorded

        try:
            sessions_done = while_alive(self._llm, asyncio.gather(*(session(key, token) for key, token in zip(keys, tokens))))
            outcomes = await _unless_handed_back(sessions_done, requests)
        finally:
            for key in keys:
                gateway.close(key)
        if outcomes is None:
            return [_not_begun(index) for index in range(request.num_generations)]
        decode = functools.partial(self.tokenizer().decode, skip_special_tokens=False)
        split = use.config.on_prefix_mismatch == "split"
        samples = []
        for index, (session, outcome) in enumerate(zip(sessions, outcomes)):
            if session.calls:
                samples += session_samples(session, index, decode, self._eos_id, outcome.reward, outcome.error, split)
            else:
                error = outcome.error or f"session {session.key} made no model call"
                samples.append(Sample.unanswered(request.prompt_ids, index, self._eos_id, error))
        return samples

    async def _environment_samples(self, request: GroupRequest, requests: _Requests) -> list[Sample]:
        """TRL's tool calling (workers/environments/): each sample leases its environment on the tool host
        (`reset` with the prompt's row), renders its conversation with its tools, and runs the chat-template
        loop; then its environment's `get_reward()`. Handed back, the group starts again elsewhere: an
        environment's state lives in the user's code, on this engine's host."""
        use, name, sampling = request.environment, request.environment_name, request.sampling
        if use.chat_template not in self._chats:
            self._chats[use.chat_template] = Chat.of_folder(self._tokenizer_dir, use.chat_template)
        chat, schemas = self._chats[use.chat_template], use.schemas[name]
        template = chat.template(schemas, sampling.skip_special_tokens)
        host, slack = self._call_tool, use.call_timeout_s + HOST_SLACK_S
        context = self._llm.model_config.max_model_len

        async def one(index: int) -> Sample:
            lease, observation = await host.environment("open", use, name, request.inputs, deadline_s=slack)
            reuse = False
            try:
                messages = with_observation(request.inputs["prompt"], observation)
                prompt_ids = chat.prompt_ids(messages, schemas)
                if len(prompt_ids) >= context:
                    raise EnvironmentFailed(
                        f"the prompt after reset is {len(prompt_ids)} tokens; the model's context is {context}"
                    )
                sample = await run_chat_sample(
                    index,
                    messages,
                    prompt_ids,
                    sampling.max_tokens,
                    context,
                    use.max_tool_calling_iterations,
                    template,
                    self._chat_turns(request, index, requests),
                    lambda calls: host.environment("call_tools", lease, calls, use.call_timeout_s, deadline_s=slack * len(calls)),
                )
                if sample.finish_reason != ABORTED:
                    sample = dataclasses.replace(sample, reward=await host.environment("reward", lease, use, deadline_s=slack))
                reuse = True
                return sample
            finally:
                with contextlib.suppress(EnvironmentFailed):  # a host that is gone took its instances along
                    await host.environment("close", lease, reuse, deadline_s=HOST_SLACK_S)

        async def guarded(index: int) -> Sample:
            try:
                return await one(index)
            except EnvironmentFailed as error:
                return Sample.unanswered(request.prompt_ids, index, self._eos_id, str(error))

        samples = [asyncio.ensure_future(guarded(index)) for index in range(request.num_generations)]
        try:
            return list(await asyncio.gather(*samples))
        except BaseException:  # one sample failed past its own guard: its siblings' requests and tool calls stop too
            for sample in samples:
                sample.cancel()
            raise

    def _chat_turns(self, request: GroupRequest, index: int, requests: _Requests):
        """How one sample of a chat-template tool group generates a turn: the user's sampling and stops, its own
        seed per turn; a turn cut short when the group is handed back."""

        async def turn(context_ids: list[int], max_tokens: int, turn_index: int) -> Turn:
            max_tokens = min(max_tokens, self._llm.model_config.max_model_len - len(context_ids))  # within the context
            if max_tokens < 1:  # the context is full: nothing to generate (vLLM refuses max_tokens 0)
                return Turn([], "", [], "length", None, [])
            seed = turn_seed(request.sampling, request.group_id, index, turn_index)
            name = f"g{request.group_id}-s{index}-t{turn_index}"
            final = await self._final_output(context_ids, continue_params(request.sampling, max_tokens, seed), name, requests)
            return to_turn(final.outputs[0]) if final is not None else Turn([], "", [], ABORTED, None, [])

        return turn

    async def started_gateway(self, use: AgentUse):
        """This engine's OpenAI-compatible gateway (workers/agents/gateway.py), started by its first agent group."""
        from workers.agents.gateway import Gateway
        from workers.agents.runner import AgentThread

        async with self._gateway_start:  # the first groups start together: one gateway for them all
            if self._gateway is None:
                gateway = Gateway(self._llm, self.engine_id, use.config, lambda: self.weights.policy_version)
                # The agents run in this process (runner.py): loopback unless agent.host says otherwise. Each
                # sample in flight holds one session, and so about one connection.
                await gateway.start(use.config.host or LOOPBACK, max_connections=2 * self.config.max_inflight_samples + 16)
                self._gateway, self._agents = gateway, AgentThread()
        return self._gateway

    def _vocabulary(self, use: ToolUse) -> Vocabulary:
        tokenizer = self._llm.get_tokenizer()
        encode = functools.partial(tokenizer.encode, add_special_tokens=False)
        end_tags = {tool.name: encode(tool.end) for tool in use.tools}
        return Vocabulary(
            encode=encode,
            decode=functools.partial(tokenizer.decode, skip_special_tokens=False),
            eos_token_id=self._eos_id,
            eos_text=self._eos_text,
            end_tag_ids={ids[0]: name for name, ids in end_tags.items() if len(ids) == 1},
        )

    async def _final_output(self, prompt_ids: list[int], params, name: str, requests: _Requests):
        """The request's final output (cut short, finish_reason "abort", when the group is handed back while
        it runs), or None when the group was handed back before it began."""
        if requests.handed_back.is_set():
            return None
        request_id = f"e{self.engine_id}-{name}-{next(self._request_ids)}"
        requests.ids.append(request_id)
        final = None
        prompt = {"prompt_token_ids": prompt_ids, "cache_salt": cache_salt(self.weights.policy_version)}
        async for output in self._llm.generate(prompt, params, request_id, lora_request=self.weights.lora):
            final = output
        return final

    async def responsive(self, timeout_s: float) -> bool:
        """Whether vLLM's engine process answers a round trip within `timeout_s` (orchestrator/rollout/
        health.py). Its scheduler loop takes the call between two model steps, so a loaded engine
        answers and a wedged or stopped one does not. A weight load or an NCCL rendezvous under way counts
        as an answer: generation is paused for it, and the sync has its own deadline."""
        if self.weights.busy:
            return True
        try:
            await asyncio.wait_for(self._llm.is_sleeping(), timeout_s)
        except TimeoutError:
            return self.weights.loads.loading  # a load that began meanwhile holds the engine process
        return True

    def shutdown(self) -> None:
        if self._agents is not None:
            self._gateway.stop_soon()
            self._agents.close()
        gc.unfreeze()  # back to the collector, so that interpreter exit cleans up as usual
        self._llm.shutdown()
        self.weights.close()
