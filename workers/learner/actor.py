"""`Learner`: the Ray actor around `GRPOLearner`. A thin shell: logic lives in grpo.py.

With `learner.workers` > 1 there is one per data-parallel rank (`rank` given); rank 0 alone publishes
weights and writes checkpoints (every rank holds the same weights, or with `learner.fsdp` rank 0
holds them gathered whole).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from orchestrator.contracts.errors import CollectiveTimeoutError
from orchestrator.contracts.learning import GRPOSettings, LearnerConfig
from orchestrator.contracts.tokenizer import TokenizerBundle
from workers.host_memory import return_freed_memory
from workers.learner.data_parallel import DataParallelRank


class Learner:
    """Created through `ray.remote(Learner)`; every method is called remotely."""

    def __init__(
        self,
        config: GRPOSettings,
        model: str,
        tokenizer: str | TokenizerBundle,
        resume_from: str | None = None,
        rank: DataParallelRank | None = None,
    ):
        """Keeps what to start from; `start` loads it. Ray reports an exception raised in a constructor only
        as the actor's death, in words; one raised by `start` reaches the driver as itself, so that a
        problem the user can fix (`UserError`) is told as one."""
        self._start_args = (config, model, tokenizer, resume_from, rank)
        self._rank = rank

    def start(self) -> str:
        """Load the model (and the checkpoint to resume from), as one data-parallel rank when given;
        returns this actor's node."""
        import warnings

        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        # TRL warns on import that it has not been tested with this vLLM; the learner does not use
        # TRL's vLLM integration at all (the rollout pool is ours).
        warnings.filterwarnings("ignore", message="TRL currently supports vLLM")
        import torch

        from workers.learner.grpo import GRPOLearner
        from workers.weights.buckets import BucketBuffer

        config, model, tokenizer, resume_from, rank = self._start_args
        gpu = torch.cuda.is_available() if config.learner.num_gpus is None else bool(config.learner.num_gpus)
        threads = torch_threads(config.learner, len(os.sched_getaffinity(0)), gpu)
        if threads is not None:
            torch.set_num_threads(threads)
        self._capped = gpu and config.learner.max_gpu_memory_fraction is not None
        if self._capped:  # colocated: the engine beside it needs its share free (placement/colocation.py)
            torch.cuda.set_per_process_memory_fraction(config.learner.max_gpu_memory_fraction)
        if rank is not None:  # before the trainer exists: accelerate must find the group open
            from workers.learner.data_parallel import join

            join(rank, use_gpu=bool(config.learner.num_gpus))
        if isinstance(tokenizer, TokenizerBundle):  # the driver's canonical tokenizer, as bytes: no shared filesystem
            self._tokenizer_dir = tempfile.TemporaryDirectory(prefix="learner-tokenizer-")
            tokenizer = str(tokenizer.write_to(Path(self._tokenizer_dir.name)))
        self._learner = GRPOLearner(config, model, tokenizer)
        self._publication = None  # the weights being handed out to engines (workers/weights/publication.py)
        self._bucket_buffer = BucketBuffer()  # what buckets are cast into, sync after sync
        self._nccl = None  # the collective path's sender, once a group is open (workers/weights/nccl.py)
        self._prepared = None  # the tensors of a delta sync's next broadcast (`prepare_delta`)
        self._delta = None  # a delta sync's baseline: the weights as the engines hold them (workers/weights/delta.py)
        if resume_from is not None:
            self._learner.load_state(resume_from)
        return self.node_id()

    def model_config(self) -> bytes:
        """The model's config.json as the learner holds it (embeddings resized for added tokens), so
        engines can start without the model files and take the weights from the learner."""
        import json

        config = self._learner.trainer.accelerator.unwrap_model(self._learner.model).config
        return json.dumps(config.to_dict(), indent=2).encode()

    def train_step(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        self._keep_publication()
        with self._collective():
            metrics = self._learner.train_step(batch)
        return_freed_memory()  # the step's gradients and activations: the engines load and generate next
        if self._capped:
            torch.cuda.empty_cache()  # the cached blocks go back: an engine beside it may start meanwhile
        return metrics

    # Object-store path (workers/weights/object_store.py).
    def publish_weights(self, bucket_bytes: int, adapter_only: bool = False, dtype: str | None = None) -> tuple[list, int, int]:
        """Open a publication of the weights (a LoRA run's `adapter_only`: its adapter) in buckets of
        about `bucket_bytes`, floating-point ones as `dtype` if given; returns (bucket headers, bytes,
        the policy version of the weights published: optimizer steps taken, checkpoints included).
        `weight_bucket` hands them out."""
        from workers.weights.publication import Publication

        self._publication = Publication(self._learner.named_weights(adapter_only), bucket_bytes, dtype, self._bucket_buffer)
        return self._publication.headers, self._publication.nbytes, self._learner.policy_version

    def publish_delta(
        self, bucket_bytes: int, dtype: str | None, anchor: bool, version: int
    ) -> tuple[list, int, int, dict | None]:
        """Open a publication of a delta sync (`_delta_tensors`); returns (bucket headers, bytes, the
        version published, the patch's manifest or None)."""
        from workers.weights.publication import Publication

        named, version, manifest = self._delta_tensors(dtype, anchor, version)
        self._publication = Publication(named, bucket_bytes, None, self._bucket_buffer)
        return self._publication.headers, self._publication.nbytes, version, manifest

    def _delta_tensors(self, dtype: str | None, anchor: bool, version: int) -> tuple[list, int, dict | None]:
        """A delta sync's tensors (workers/weights/delta.py): with `anchor`, the dense weights, kept (cast
        to `dtype`) as what the engines hold from now on; else the patch from those to the weights now.
        Returns (the tensors, the version: `version`, or the learner's own count if it is ahead
        (object_store.py), the patch's manifest or None)."""
        from workers.weights.delta import DeltaEncoder

        self._keep_publication()  # a publication still open may view the baseline the patch changes
        if self._delta is None or self._delta.dtype != (getattr(torch, dtype) if dtype else None):
            self._delta = DeltaEncoder(dtype)
        version = max(version, self._learner.policy_version)
        if not anchor:
            manifest, named = self._delta.encode(self._learner.named_weights(), version)
            return named, version, manifest.as_dict()
        if self._delta.version != version:  # else the baseline is these weights already
            self._delta.anchor(self._learner.named_weights(), version)
        return list(self._delta.weights.items()), version, None

    def weight_bucket(self, index: int):
        """Bucket `index` of the open publication: Ray stores it as this returns."""
        return self._open_publication(f"weight bucket {index}").bucket(index)

    def adapter_config(self) -> dict | None:
        return self._learner.adapter_config()

    def published_checksum(self) -> str | None:
        """Close the publication: the checksum of its buckets, or None if some were never asked for
        (every engine failed before the end)."""
        publication, self._publication = self._open_publication("the published checksum"), None
        return None if publication.open else publication.checksum()

    def _open_publication(self, asked_for: str):
        if self._publication is None:
            raise RuntimeError(f"{asked_for} was asked for, but no weights are being published (publish_weights first)")
        return self._publication

    def _keep_publication(self) -> None:
        """The weights are about to change: a publication still open keeps the buckets it has left."""
        if self._publication is not None and self._publication.open:
            self._publication.keep()

    # Collective path (workers/weights/nccl.py): the learner is rank 0 of the weight-transfer group.
    def nccl_endpoint(self) -> tuple[str, int]:
        from workers.weights.nccl import rendezvous

        return rendezvous()

    def nccl_open(self, backend: str, address: str, port: int, world_size: int, timeout_s: float) -> str | None:
        """Open the group as rank 0; None, or why it did not open (the driver says so and falls back)."""
        from workers.weights.nccl import CollectiveSender

        if self._nccl is not None:  # the group's members changed: the new group replaces it
            self._nccl.close()
            self._nccl = None
        try:
            self._nccl = CollectiveSender(backend, address, port, world_size, timeout_s)
        except Exception as error:  # torch.distributed's and NCCL's errors have no common type
            return f"{type(error).__name__}: {error}"
        return None

    def weight_metadata(self, dtype: str | None = None) -> dict:
        from workers.weights.nccl import metadata

        return metadata(self._learner.named_weights(), dtype)

    def prepare_delta(self, dtype: str | None, anchor: bool, version: int) -> tuple[dict, int, dict | None]:
        """The collective path's delta sync: the tensors the next `nccl_send(prepared=True)` broadcasts
        (`_delta_tensors`), as (their metadata, the version, the patch's manifest or None)."""
        from workers.weights.nccl import metadata

        self._prepared, version, manifest = self._delta_tensors(dtype, anchor, version)
        return metadata(self._prepared), version, manifest

    def nccl_send(self, bucket_bytes: int, dtype: str | None = None, prepared: bool = False) -> tuple[str | None, int]:
        """(checksum of what was sent, bytes); checksum None if the broadcast failed (a gloo peer died:
        the driver replaces it and reloads the others; an NCCL broadcast blocks instead). `prepared`: the
        tensors `prepare_delta` made, instead of the weights."""
        from workers.weights.nccl import cast

        sent = 0

        def counted(named):
            nonlocal sent
            for name, tensor in named:
                sent += tensor.numel() * tensor.element_size()
                yield name, tensor

        named, self._prepared = (self._prepared, None) if prepared else (cast(self._learner.named_weights(), dtype), None)
        try:
            checksum = self._nccl.send(counted(named), bucket_bytes)
        except RuntimeError as error:  # torch.distributed's errors; the group cannot broadcast again
            logging.getLogger(__name__).warning(f"the {self._nccl.backend} weight broadcast failed: {error}")
            self._nccl.close()
            self._nccl = None
            return None, sent
        return checksum, sent

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def save(self, folder: str) -> str:
        with self._collective():  # sharded, the ranks gather the weights and optimizer state together
            self._learner.save(folder)
        return folder

    @contextlib.contextmanager
    def _collective(self):
        """Around a call in which the data-parallel ranks meet: a plain RuntimeError (or a torch.distributed
        backend error) that ends it once the group's collective timeout has passed is that timeout (gloo
        says so only in words), raised as `CollectiveTimeoutError`."""
        rank = self._rank
        began = time.monotonic()
        try:
            yield
        except RuntimeError as error:
            # gloo's timeout is a plain RuntimeError (a backend's own error a DistBackendError); a subclass
            # such as torch.OutOfMemoryError is something else, whenever it happens
            collective = type(error) is RuntimeError or isinstance(error, torch.distributed.DistBackendError)
            if rank is None or not collective or time.monotonic() - began < rank.timeout_s:
                raise
            raise CollectiveTimeoutError(
                f"rank {rank.rank} of {rank.world_size} waited past the group's timeout ({rank.timeout_s:g}s) in a "
                f"collective call: {error}"
            ) from error


def torch_threads(learner: LearnerConfig, cores: int, gpu: bool) -> int | None:
    """The learner's torch threads (`learner.torch_threads`), or None to keep Ray's: Ray sets an actor's
    OMP_NUM_THREADS to its num_cpus, so a CPU learner would train on 1 core of a node whose engines
    sit idle while it trains. A GPU learner keeps Ray's, leaving the node's cores to the engines."""
    if learner.torch_threads is not None:
        return learner.torch_threads
    if gpu:
        return None
    return max(1, cores // learner.workers)  # the workers of a learner group share their node
