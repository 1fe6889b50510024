"""`LearnerGroup`: the learner actor(s), their placement group, and the calls the step loop makes.

The driver talks to the learner only through this object: it starts the actors on learner nodes
(one placement group, owned here and removed at shutdown), asks for the model's config, hands
each step's batch over, has checkpoints saved, and names the actor that publishes weights (`lead`)
to the weight transport. With `learner.workers` > 1 the actors are the ranks of one data-parallel
group: each step's batch is split into whole groups per rank (shards.py), and rank 0 is the
lead (it alone publishes, and saves; sharded ranks help it gather). A learner rank that dies, stops
answering in a collective call, or is stuck past a sync deadline surfaces as `LearnerDiedError` saying why
(death.py); `restart` replaces every rank from a checkpoint.
"""

from __future__ import annotations

import numpy as np

from orchestrator.contracts.errors import CollectiveTimeoutError, LearnerDiedError, UserError
from orchestrator.contracts.learning import GRPOSettings
from orchestrator.contracts.tokenizer import TokenizerBundle
from orchestrator.learner.death import death_cause, oom_kills
from orchestrator.learner.shards import shard_batch
from orchestrator.placement.labels import LEARNER_ROLE
from workers.weights.transport import SyncReport, WeightTransport

_PROBE_TIMEOUT_S = 10.0  # asking a learner's node for its OOM counters
_PEER_GRACE_S = 10.0  # after a rank's collective call failed: how long its peers get to report a death


class LearnerGroup:
    def __init__(self, ranks: list, placement_group=None, start_args: tuple | None = None, sharded: bool = False):
        self.ranks = ranks  # Ray actor handles of workers.learner.actor.Learner, by data-parallel rank
        self._placement_group = placement_group
        self._start_args = start_args  # (cluster, config, model, tokenizer, resume_from, timeout_s, colocation)
        self._sharded = sharded  # learner.fsdp: every rank takes part in a save
        self._node_ids: list[str | None] = [None] * len(ranks)
        self._oom_before: dict[str, dict[str, int] | None] = {}

    @property
    def lead(self):
        """The actor that publishes weights and saves checkpoints: rank 0."""
        return self.ranks[0]

    @classmethod
    def start(
        cls,
        cluster,
        config: GRPOSettings,
        model: str,
        tokenizer: str | TokenizerBundle,
        resume_from: str | None,
        timeout_s: float,
        colocation=None,
    ) -> LearnerGroup:
        """Place and start the learner and wait until it has loaded the model; waits up to
        `timeout_s` for a learner node with room. `colocation`: the GPUs it shares with the engines
        (placement/colocation.py); its ranks take its bundles, restarted ones too."""
        start_args = (cluster, config, model, tokenizer, resume_from, timeout_s, colocation)
        group = cls(*_launch(*start_args), start_args=start_args, sharded=config.learner.fsdp)
        group._watch()
        return group

    def restart(self, checkpoint: str | None) -> None:
        """Replace the learner by a new one loaded from `checkpoint` (a checkpoint folder: weights,
        optimizer, scheduler, RNG; None: the model the run started from)."""
        cluster, config, model, tokenizer, resume_from, timeout_s, colocation = self._start_args
        if checkpoint is not None:  # the canonical tokenizer stays what the run started with
            resume_from = checkpoint
            if config.lora is None:  # a LoRA checkpoint holds the adapter: the base model stays the run's
                model = checkpoint
        self.shutdown()
        self.ranks, self._placement_group = _launch(cluster, config, model, tokenizer, resume_from, timeout_s, colocation)
        self._node_ids = [None] * len(self.ranks)
        self._watch()

    def _watch(self) -> None:
        """Start every rank and wait for it to be up; note their nodes and those nodes' OOM-kill counters,
        so a later death can be told apart as out of memory. A rank that fails to start (not for
        something the user can fix, which is raised as itself) is the learner's death."""
        import ray

        try:
            self._node_ids = self._call_all("starting", [rank.start.remote() for rank in self.ranks])
        except ray.exceptions.RayTaskError as error:
            cause = error.cause
            raise LearnerDiedError(
                f"the learner died while starting (it failed to start: {type(cause).__name__}: {cause})"
            ) from None
        self._oom_before = {node: self._probe_node(node) for node in dict.fromkeys(self._node_ids)}

    def model_config(self) -> bytes:
        """The model's config.json as the learner holds it (what engines start from)."""
        return self._call("sending the model config", self.lead.model_config.remote())

    def adapter_config(self) -> dict | None:
        """A LoRA run's adapter_config.json (PEFT's), with which engines serve the adapter; None without LoRA."""
        return self._call("sending the adapter config", self.lead.adapter_config.remote())

    def train_step(self, batch: dict, group_ids: np.ndarray | None = None) -> dict[str, float]:
        """One optimizer step on the step's batch; `group_ids` (each row's group) is needed with more
        than one rank, which each get whole groups. Returns the step's metrics (every rank's are the
        whole step's; rank 0's are returned)."""
        if len(self.ranks) == 1:
            return self._call("training", self.lead.train_step.remote(batch))
        if group_ids is None:
            raise ValueError("a learner of several ranks needs each row's group id to split the batch")
        shards = shard_batch(batch, group_ids, len(self.ranks))
        return self._call_all("training", [rank.train_step.remote(shard) for rank, shard in zip(self.ranks, shards)])[0]

    def save(self, folder: str) -> str:
        """Rank 0 writes the checkpoint; sharded ranks (learner.fsdp) all gather its optimizer state."""
        if self._sharded:
            return self._call_all("saving a checkpoint", [rank.save.remote(folder) for rank in self.ranks])[0]
        return self._call("saving a checkpoint", self.lead.save.remote(folder))

    def sync(
        self, transport: WeightTransport, engines: dict[int, object], version: int, adapter_only: bool = False
    ) -> SyncReport:
        """`transport.sync` from the lead rank. Its death becomes `LearnerDiedError`, as a learner stuck
        past the deadline already is (`LearnerSyncTimeout`); engine deaths stay in the report."""
        import ray

        try:
            return transport.sync(self.lead, engines, version, adapter_only)
        except ray.exceptions.RayActorError as error:  # an engine's death is reported, never raised
            raise self._died("publishing weights", error) from None

    def node_ids(self) -> list[str]:
        """The learner's nodes, rank 0's first."""
        if None in self._node_ids:
            self._node_ids = self._call_all("starting", [rank.node_id.remote() for rank in self.ranks])
        return list(dict.fromkeys(self._node_ids))

    def _call(self, doing: str, ref, rank: int = 0):
        """`ref`'s result. A problem the user can fix (`UserError`, e.g. a setting the model cannot run
        with) is raised as itself; the learner's death as `LearnerDiedError`."""
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as error:
            raise self._died(doing, error, rank) from None
        except ray.exceptions.RayTaskError as error:
            if isinstance(error.cause, UserError):
                raise error.cause from None
            raise

    def _call_all(self, doing: str, refs: list) -> list:
        """Every rank's answer, in rank order. Ranks meet in collective calls, so the others wait on a
        dead one: its death is raised as soon as it is known, not after the others give up. A rank that
        neither answers nor dies (hung, stopped, cut off) holds the others until their collective call
        times out (the process group's timeout): then it is reported as the learner's death too."""
        import ray

        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                self._call(doing, ready[0], refs.index(ready[0]))
            except ray.exceptions.RayTaskError as error:  # a collective call fails when a peer dies: that death is the cause
                self._raise_death(doing, refs)
                # and no peer died: a rank that gave up waiting in a collective call (NCCL's watchdog ends
                # the waiting process instead: that is a death) was held by those that never answered
                if isinstance(error.cause, CollectiveTimeoutError):
                    self._raise_silent(doing, refs, refs.index(ready[0]))
                raise
        return [ray.get(ref) for ref in refs]

    def _raise_death(self, doing: str, refs: list) -> None:
        """`LearnerDiedError` for the first rank of `refs` found dead within `_PEER_GRACE_S`, if any."""
        import ray

        done, _ = ray.wait(refs, num_returns=len(refs), timeout=_PEER_GRACE_S)
        for ref in done:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as error:
                raise self._died(doing, error, refs.index(ref)) from None
            except ray.exceptions.RayTaskError:
                pass

    def _raise_silent(self, doing: str, refs: list, failed: int) -> None:
        """`LearnerDiedError` naming the ranks that have not answered, once rank `failed` timed out waiting
        in a collective call and `_raise_death` gave the others time to time out too."""
        import ray

        _, silent = ray.wait(refs, num_returns=len(refs), timeout=0)
        if silent:
            ranks = ", ".join(str(refs.index(ref)) for ref in silent)
            raise LearnerDiedError(
                f"the learner stopped answering while {doing} (rank{'s' if len(silent) > 1 else ''} {ranks} of "
                f"{len(self.ranks)} gave no answer; rank {failed} timed out waiting in a collective call: hung, "
                "stopped, or its node cut off)"
            )

    def _died(self, doing: str, error: BaseException, rank: int = 0) -> LearnerDiedError:
        node = self._node_ids[rank] if rank < len(self._node_ids) else None
        cause = death_cause(str(error), self._oom_before.get(node), self._probe_node(node))
        if len(self.ranks) > 1:
            cause = f"rank {rank} of {len(self.ranks)}: {cause}"
        return LearnerDiedError(f"the learner died while {doing} ({cause})")

    def _probe_node(self, node_id: str | None) -> dict[str, int] | None:
        """The OOM-kill counters of a learner's node, or None when it cannot be asked in time."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if node_id is None:
            return None
        probe = ray.remote(oom_kills).options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
        try:
            return ray.get(probe.remote(), timeout=_PROBE_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError):
            return None

    def shutdown(self) -> None:
        import ray

        for rank in self.ranks:
            ray.kill(rank)
        if self._placement_group is not None:
            ray.util.remove_placement_group(self._placement_group)
            self._placement_group = None


def _launch(cluster, config: GRPOSettings, model: str, tokenizer, resume_from: str | None, timeout_s: float, colocation):
    """(the learner actors by rank, their placement group: None where it is not theirs), placed on learner
    nodes, or in the colocation's bundles. Several ranks meet at an address and port chosen on rank 0's
    node before any of them starts."""
    import ray

    from workers.learner.actor import Learner
    from workers.learner.data_parallel import DataParallelRank
    from workers.weights.nccl import rendezvous

    learner = config.learner
    if colocation is not None:  # the run's group: a restart takes the same bundles, the engines keep theirs
        options, group = [colocation.learner_options(rank) for rank in range(learner.workers)], None
    elif learner.workers == 1:
        options, group = cluster.placement.actor_options(LEARNER_ROLE, learner.num_cpus, learner.num_gpus, timeout_s)
        options = [options]
    else:
        options, group = cluster.placement.gang_options(
            LEARNER_ROLE, learner.num_cpus, learner.num_gpus, learner.workers, timeout_s
        )
    if learner.workers == 1:
        return [ray.remote(Learner).options(**options[0]).remote(config, model, tokenizer, resume_from)], group
    on_rank_0 = {key: value for key, value in options[0].items() if key == "scheduling_strategy"}
    address, port = ray.get(ray.remote(rendezvous).options(num_cpus=0, **on_rank_0).remote(), timeout=timeout_s)
    actor, world = ray.remote(Learner), learner.workers
    return [
        actor.options(**rank_options).remote(
            config,
            model,
            tokenizer,
            resume_from,
            DataParallelRank(rank, world, address, port, timeout_s=learner.collective_timeout_s),
        )
        for rank, rank_options in enumerate(options)
    ], group
