"""`LearnerGroup` with `learner.workers=2`: two Ray learner actors in one gloo group, each holding the
whole model (DDP) or half of it (FSDP2), train the run one learner trains (same per-step losses, same
weights), write one checkpoint (rank 0; sharded, with the optimizer state gathered from both), restart
together from it, and a rank that dies is reported as the learner's death, naming the rank."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import LearnerDiedError, UserError
from orchestrator.learner.group import LearnerGroup
from tests.workers.learner.grpo_steps import grpo_steps

GROUPS, GROUP_SIZE, TEMPERATURE = 5, 2, 1.0


def _start(
    ray_session, tiny, workers: int, fsdp: bool = False, timeout_s: float = 300, collective_s: float = 1800
) -> LearnerGroup:
    config = TrainConfig(
        num_generations=GROUP_SIZE,
        prompts_per_step=GROUPS,
        max_steps=4,
        learning_rate=1e-3,
        temperature=TEMPERATURE,
        learner={"workers": workers, "fsdp": fsdp, "collective_timeout_s": collective_s},
    )
    return LearnerGroup.start(ray_session, config, str(tiny.model_dir), str(tiny.tokenizer_dir), None, timeout_s)


# Packed micro-batches of other shapes round differently, and Adam divides each gradient by its own running
# scale, so a near-zero gradient's rounding moves its weight by up to the learning rate: weights agree to
# 1e-4 where gradients (grad_norm) agree to 1e-5.
WEIGHTS_CLOSE = 1e-4


def _same_weights(a, b) -> float:
    first, second = load_file(f"{a}/model.safetensors"), load_file(f"{b}/model.safetensors")
    assert first.keys() == second.keys()
    return max(float((first[name] - second[name]).abs().max()) for name in first)


# The DDP group is also trained by test_learner_workers.py (slow) and, process by process, by test_data_parallel.py.
@pytest.mark.parametrize("fsdp", [pytest.param(False, marks=pytest.mark.slow), True], ids=["ddp", "fsdp"])
def test_two_ranks_train_checkpoint_and_restart_as_one_learner(ray_session, tiny, tmp_path, fsdp):
    steps = grpo_steps(tiny, 4, GROUPS, GROUP_SIZE, TEMPERATURE)
    one, two = _start(ray_session, tiny, 1), _start(ray_session, tiny, 2, fsdp)
    try:
        assert len(two.ranks) == 2 and two.lead is two.ranks[0]
        assert two.node_ids() == one.node_ids()  # one local node holds both ranks
        for step, (batch, group_ids) in enumerate(steps):
            if step == 2:  # both from their own checkpoint: every rank of `two` resumes from rank 0's
                for group, name in ((one, "one"), (two, "two")):
                    group.save(str(tmp_path / name))
                    group.restart(str(tmp_path / name))
                assert _same_weights(tmp_path / "one", tmp_path / "two") <= WEIGHTS_CLOSE
            alone, together = one.train_step(batch, group_ids), two.train_step(batch, group_ids)
            assert together["loss"] == pytest.approx(alone["loss"], abs=1e-4), step
            # The first step's gradients are of the same weights: 1e-5. Later ones are of weights that differ by up to
            # WEIGHTS_CLOSE, and the gradients with them (3.8e-5 relative at step 1 on an Intel Xeon, family 6 model 106).
            assert together["grad_norm"] == pytest.approx(alone["grad_norm"], rel=1e-5 if step == 0 else 2e-4), step
        one.save(str(tmp_path / "one-end"))
        two.save(str(tmp_path / "two-end"))
        assert _same_weights(tmp_path / "one-end", tmp_path / "two-end") <= WEIGHTS_CLOSE
    finally:
        one.shutdown()
        two.shutdown()


def test_a_dead_rank_is_the_learner_dying(ray_session, tiny):
    import ray

    ((batch, group_ids),) = grpo_steps(tiny, 1, GROUPS, GROUP_SIZE, TEMPERATURE)
    two = _start(ray_session, tiny, 2)
    try:
        ray.kill(two.ranks[1])
        with pytest.raises(LearnerDiedError, match=r"the learner died while training \(rank 1 of 2: "):
            two.train_step(batch, group_ids)
    finally:
        two.shutdown()


@pytest.mark.slow  # 60 s, most of it the timeout and the peers' grace
def test_a_stopped_rank_is_the_learner_dying_once_the_collective_times_out(ray_session, tiny):
    """SIGSTOP: the rank neither answers nor dies; rank 0 waits in its first collective call until the
    process group's timeout (learner.collective_timeout_s, 30 s here), then the learner is reported dead."""
    import os
    import signal
    import time

    import psutil
    import ray

    ((batch, group_ids),) = grpo_steps(tiny, 1, GROUPS, GROUP_SIZE, TEMPERATURE)
    two = _start(ray_session, tiny, 2, collective_s=30)
    stopped = ray.get(two.ranks[1].__ray_call__.remote(lambda self: os.getpid()))
    try:
        os.kill(stopped, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(
            LearnerDiedError, match=r"the learner stopped answering while training \(rank 1 of 2 gave no answer; rank 0 timed out"
        ):
            two.train_step(batch, group_ids)
        assert time.monotonic() - start < 30 + 15  # the timeout and the peers' grace, not a hang
        two.shutdown()  # what a restart does first: the stopped process goes too
        assert not psutil.wait_procs([psutil.Process(stopped)], timeout=30)[1], "the stopped rank outlived shutdown"
    finally:
        if psutil.pid_exists(stopped):
            os.kill(stopped, signal.SIGCONT)
        two.shutdown()


def test_a_setting_the_learner_cannot_run_is_a_user_error_and_a_failed_start_a_death(ray_session, tiny, tmp_path):
    """Ray reports an exception raised in an actor's constructor only as the actor's death, in words: the
    learner starts in a method instead, so that what the user can fix reaches the CLI as a user error
    (one line, exit 2), recognised by its type."""
    import ray

    from workers.learner.actor import Learner

    config = TrainConfig(num_generations=2, prompts_per_step=1, max_steps=1)
    learner = ray.remote(Learner).options(num_cpus=0)
    no_gpu = learner.remote(
        config.model_copy(update={"learner": config.learner.model_copy(update={"num_gpus": 1})}),
        str(tiny.model_dir),
        str(tiny.tokenizer_dir),
    )
    no_model = learner.remote(config, str(tmp_path), str(tiny.tokenizer_dir))  # a folder without a model
    try:
        with pytest.raises(UserError, match=r"learner.num_gpus is 1 but torch \S+ sees no GPU here"):
            LearnerGroup([no_gpu])._watch()
        with pytest.raises(
            LearnerDiedError, match=r"the learner died while starting \(it failed to start: ValueError: Unrecognized model in "
        ):
            LearnerGroup([no_model])._watch()
    finally:
        ray.kill(no_gpu)
        ray.kill(no_model)
