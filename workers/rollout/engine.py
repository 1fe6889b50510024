"""One vLLM engine that generates groups: where every sample is born.

A plain class (no Ray in it) around vLLM's `AsyncLLM`: continuous batching across all groups in
flight, and pause/resume for weight updates (workers/weights/loading.py: a load that fails part-way never
resumes, and the engine then refuses to generate). It is built with the canonical tokenizer from a
folder the caller wrote, and it reports the fingerprint of the tokenizer vLLM really loaded. When that
folder holds PEFT's adapter_config.json (a LoRA run) it starts with vLLM's LoRA support on and serves
every request with the adapter the learner sent last (workers/weights/adapters.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import time
from pathlib import Path
from typing import Literal

from orchestrator.contracts.fingerprint import TokenizerFingerprint, fingerprint
from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.tools import ToolUse
from workers.fences import vllm as fenced_vllm
from workers.rollout.multi_turn import CallTool, Vocabulary, run_sample
from workers.rollout.sampling import to_samples, to_turn, turn_params, turn_seed, vllm_params
from workers.weights import adapters
from workers.weights.buckets import WeightBucket, checksum
from workers.weights.incoming import IncomingWeights
from workers.weights.loading import WeightLoads

Device = Literal["cpu", "cuda"]
CPU_KV_CACHE_BYTES = 256 << 20
FEED_WAIT_S = 60.0  # how long a bucket waits for its load to start (the driver sends the load first)


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
        logprobs_mode="processed_logprobs",  # logprobs of the distribution actually sampled
        enforce_eager=on_cpu if config.enforce_eager is None else config.enforce_eager,
        disable_log_stats=True,
        load_format="dummy" if placeholder_weights else "auto",
        worker_extension_cls="workers.weights.vllm_worker.WeightReceiver",
        weight_transfer_config=None if on_cpu else {"backend": "nccl"},
        **({"enable_lora": True, "max_lora_rank": lora_rank, "max_loras": 1} if lora_rank else {}),
    )


def max_lora_rank(config: RolloutConfig, rank: int) -> int:
    """The engines' `max_lora_rank` for an adapter of rank `rank`: `rollout.max_lora_rank`, or the
    smallest value vLLM accepts that holds it."""
    if config.max_lora_rank is not None:
        return config.max_lora_rank
    return next(allowed for allowed in LORA_RANKS if allowed >= rank)


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
        self.policy_version = 0
        self._request_ids = itertools.count()
        self._call_tool = call_tool
        self._incoming: dict[int, IncomingWeights] = {}  # loads under way, by policy version
        self._incoming_changed = asyncio.Event()
        self._ended: set[int] = set()  # versions whose load failed or was aborted: their feeds fail at once
        self._loading = asyncio.Lock()
        self._joining = False  # in the NCCL rendezvous of `init_nccl`
        # A LoRA run's bundle holds PEFT's adapter_config.json: the engine serves the adapter the learner sends.
        adapter_config = tokenizer_dir / adapters.ADAPTER_CONFIG
        self._adapter_config = json.loads(adapter_config.read_text()) if adapter_config.is_file() else None
        self._adapter_dir = tokenizer_dir / "adapter"
        self._lora = None  # the LoRARequest every request carries, once an adapter is loaded
        rank = max_lora_rank(config, self._adapter_config["r"]) if self._adapter_config else None
        if device == "cpu" and config.cpu_threads_bind is not None:  # read by vLLM's engine process as it starts
            os.environ["VLLM_CPU_OMP_THREADS_BIND"] = config.cpu_threads_bind
        self._llm = AsyncLLM.from_engine_args(
            engine_args(model, tokenizer_dir, config, device, seed, placeholder_weights, lora_rank=rank)
        )
        self._loads = WeightLoads(engine_id, pause=self._pause, resume=self._llm.resume_generation)
        tokenizer = self._llm.get_tokenizer()
        self._eos_id = tokenizer.eos_token_id
        self._eos_text = tokenizer.eos_token

    async def warm_up(self) -> None:
        """One short request, so the first real group does not pay for kernel set-up."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=2, ignore_eos=True)
        async for _ in self._llm.generate({"prompt_token_ids": [self._eos_id or 0]}, params, f"e{self.engine_id}-warm-up"):
            pass

    def tokenizer_fingerprint(self) -> TokenizerFingerprint:
        return fingerprint(self._llm.get_tokenizer())

    async def generate(self, request: GroupRequest) -> GroupResult:
        """All `num_generations` samples of one group, stamped with the policy that made them. Raises
        `WeightLoadFailedError` once a weight load failed part-way (before or while it runs)."""
        self._loads.check()
        version = self.policy_version
        request_ids: list[str] = []
        work = self._tool_samples(request, request_ids) if request.tools else self._samples(request, request_ids)
        try:
            samples = await asyncio.wait_for(self._loads.unless_failed(work), self.config.request_timeout_s)
        except TimeoutError:
            await self._llm.abort(request_ids)
            raise TimeoutError(
                f"engine {self.engine_id}: group {request.group_id} did not finish within "
                f"rollout.request_timeout_s={self.config.request_timeout_s}s"
            ) from None
        return GroupResult(group_id=request.group_id, engine_id=self.engine_id, policy_version=version, samples=samples)

    async def _samples(self, request: GroupRequest, request_ids: list[str]) -> list[Sample]:
        """Single-turn: one vLLM request with n = num_generations."""
        params = vllm_params(request.sampling, request.num_generations, request.group_id)
        final = await self._final_output(request.prompt_ids, params, f"g{request.group_id}", request_ids)
        return to_samples(final.outputs, self._eos_id, self._eos_text, request.sampling.top_logprobs)

    async def _tool_samples(self, request: GroupRequest, request_ids: list[str]) -> list[Sample]:
        """Multi-turn: every sample runs its own generate -> tool -> continue loop, all concurrently."""
        use = request.tools
        vocabulary = self._vocabulary(use)

        def generate_turn(sample_index: int):
            async def turn(context_ids: list[int], max_tokens: int, turn_index: int):
                seed = turn_seed(request.sampling, request.group_id, sample_index, turn_index)
                params = turn_params(request.sampling, use, max_tokens, seed, list(vocabulary.end_tag_ids))
                name = f"g{request.group_id}-s{sample_index}-t{turn_index}"
                return to_turn((await self._final_output(context_ids, params, name, request_ids)).outputs[0])

            return turn

        context = {"prompt": request.prompt, "group_id": request.group_id}
        samples = [
            asyncio.ensure_future(
                run_sample(
                    i,
                    request.prompt_ids,
                    request.sampling.max_tokens,
                    use,
                    vocabulary,
                    generate_turn(i),
                    self._call_tool,
                    context,
                )
            )
            for i in range(request.num_generations)
        ]
        try:
            return list(await asyncio.gather(*samples))
        except BaseException:  # one sample failed: its siblings' requests and tool calls stop too
            for sample in samples:
                sample.cancel()
            raise

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

    async def _final_output(self, prompt_ids: list[int], params, name: str, request_ids: list[str]):
        request_id = f"e{self.engine_id}-{name}-{next(self._request_ids)}"
        request_ids.append(request_id)
        final = None
        prompt = {"prompt_token_ids": prompt_ids}
        async for output in self._llm.generate(prompt, params, request_id, lora_request=self._lora):
            final = output
        return final

    async def responsive(self, timeout_s: float) -> bool:
        """Whether vLLM's engine process answers a round trip within `timeout_s` (orchestrator/rollout/
        health.py). Its scheduler loop takes the call between two model steps, so a loaded engine
        answers and a wedged or stopped one does not. A weight load or an NCCL rendezvous under way counts
        as an answer: generation is paused for it, and the sync has its own deadline."""
        if self._loads.loading or self._loading.locked() or self._joining:
            return True
        try:
            await asyncio.wait_for(self._llm.is_sleeping(), timeout_s)
        except TimeoutError:
            return self._loads.loading  # a load that began meanwhile holds the engine process
        return True

    async def load_weights(self, headers: list, version: int, timeout_s: float) -> tuple[int, str]:
        """Pause, load the buckets `feed_weights` passes on as they arrive, resume; requests in flight
        are kept, not dropped. `headers` are the buckets' `WeightBucket.header()`s, in feeding order;
        no bucket may wait longer than `timeout_s` for the one before it. A load that fails (or whose
        workers disagree) raises `WeightLoadFailedError` and never resumes. In a LoRA run the adapter's
        buckets replace the adapter served (workers/weights/adapters.py)."""
        if version in self._ended:  # the driver gave this load up before it arrived
            raise RuntimeError(f"engine {self.engine_id}: the load of policy version {version} was aborted before it began")
        incoming = IncomingWeights(version, headers, timeout_s, readers=self.config.tensor_parallel_size)
        self._incoming[version] = incoming  # before any wait: the first feeds may be here already
        self._incoming_changed.set()
        try:
            if incoming.adapter_count and self._adapter_config is None:
                raise ValueError(f"engine {self.engine_id} was sent a LoRA adapter but was not started for one")

            async def load() -> str:
                if incoming.closed:  # aborted while this load waited for the engine to pause
                    raise RuntimeError(f"engine {self.engine_id}: the load of policy version {version} was aborted")
                base_digest = await self._load_base(incoming.message) if incoming.ring else None
                adapter_digest = await self._load_adapter(await incoming.adapter()) if incoming.adapter_count else None
                return adapters.combined_checksum(base_digest, adapter_digest)

            async with self._loading:  # one load at a time
                self._loads.check()  # a failed engine takes no more loads
                digest = await self._loads.load(version, load)
        except BaseException:
            self._ended.add(version)  # buckets still on their way fail at once
            raise
        finally:
            incoming.close()
            del self._incoming[version]
        self.policy_version = version
        return version, digest

    async def feed_weights(self, version: int, index: int, bucket: WeightBucket) -> None:
        """Bucket `index` of the load of `version`; returns once it is passed on (the object store may
        free it then)."""
        waited = 0.0
        while version not in self._incoming:  # its `load_weights` call may not have started yet
            if version in self._ended:
                raise RuntimeError(
                    f"engine {self.engine_id}: weight bucket {index} of version {version} came after its load failed"
                )
            if waited >= FEED_WAIT_S:
                raise TimeoutError(
                    f"engine {self.engine_id}: weight bucket {index} of version {version} arrived, but its load_weights "
                    f"call did not within {FEED_WAIT_S:.0f}s"
                )
            self._incoming_changed.clear()
            start = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._incoming_changed.wait(), FEED_WAIT_S - waited)
            waited += time.monotonic() - start
        await self._incoming[version].feed(index, bucket)

    def abort_weights(self, version: int) -> None:
        """Stop the load of `version` (the driver gave it up): it fails, and the engine stays paused. An
        abort that comes before its load fails the load as it arrives. A load that already finished
        stands: the driver aborts every engine when the learner fails at the end of a sync, and a
        learner restarted from a checkpoint sends the same version number again."""
        if version in self._incoming:
            self._incoming[version].close()
        elif version == self.policy_version:
            return
        self._ended.add(version)
        self._incoming_changed.set()  # feeds waiting for the load see it ended

    async def _load_base(self, message: dict) -> str:
        checksums = await self._llm.collective_rpc("load_weight_buckets", args=(message,))
        if len(set(checksums)) != 1:
            raise RuntimeError(f"workers loaded different weights: {checksums}")
        return checksums[0]

    async def _load_adapter(self, buckets: list[WeightBucket]) -> str:
        """Write the adapter where vLLM reads it and load it in place of the one served: one LoRA id for
        the whole run, so requests in flight go on with the new adapter, as with new full weights."""
        from vllm.lora.request import LoRARequest

        digest = checksum(buckets)  # of the bytes received, which are the bytes written
        path = adapters.write_adapter(self._adapter_dir, self._adapter_config, buckets)
        lora = LoRARequest("policy", 1, str(path))
        if not await self._llm.add_lora(LoRARequest("policy", 1, str(path), load_inplace=True)):
            raise RuntimeError(f"vLLM did not load the adapter written to {path}")
        self._lora = lora
        return digest

    async def _pause(self) -> None:
        """`AsyncLLM.pause_generation(mode="keep", clear_cache=True)` without its closing 20 ms sleep,
        which on CPU was a tenth of every weight sync (workers/fences/vllm.py says why it can go)."""
        await fenced_vllm.pause_keep_requests(self._llm)

    async def init_nccl(self, init_info: dict) -> None:
        """GPU path: join the learner's NCCL weight-transfer group (blocks until all ranks join)."""
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        self._joining = True  # the engine process waits in the rendezvous: not wedged (see `responsive`)
        try:
            await self._llm.init_weight_transfer_engine(WeightTransferInitRequest(init_info=init_info))
        finally:
            self._joining = False

    async def receive_nccl(self, metadata: dict, version: int) -> tuple[int, str]:
        """GPU path: the same pause -> load -> resume as `load_weights`, bytes over NCCL (a receive
        that never completes, because a peer died mid-broadcast, keeps the engine paused)."""
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        from workers.weights.nccl import UNVERIFIED

        async def load() -> None:
            await self._llm.start_weight_update()
            await self._llm.update_weights(WeightTransferUpdateRequest(update_info=metadata))
            await self._llm.finish_weight_update(weight_version=str(version))

        await self._loads.load(version, load)
        self.policy_version = version
        return version, UNVERIFIED

    def shutdown(self) -> None:
        self._llm.shutdown()
        for incoming in list(self._incoming.values()):
            incoming.close()
