"""The learner actor's shell, without Ray: a data-parallel call that fails once the group's collective
timeout has passed is reported as a `CollectiveTimeoutError` (gloo raises a plain RuntimeError that
says so only in words), and any earlier failure as itself."""

import time

import pytest
import torch

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import CollectiveTimeoutError
from workers.learner.actor import Learner
from workers.learner.data_parallel import DataParallelRank


def _learner(rank: DataParallelRank | None) -> Learner:
    return Learner(TrainConfig(), "unused", "unused", rank=rank)  # builds nothing until start()


def _failing_after(learner: Learner, seconds: float, error: Exception):
    with learner._collective():
        time.sleep(seconds)
        raise error


def test_a_failure_past_the_collective_timeout_is_a_collective_timeout():
    rank = DataParallelRank(1, 2, "127.0.0.1", 29500, timeout_s=0.05)
    gloo = RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 50ms for recv operation to complete")
    with pytest.raises(CollectiveTimeoutError, match=r"rank 1 of 2 waited past the group's timeout \(0.05s\)") as raised:
        _failing_after(_learner(rank), 0.1, gloo)
    assert raised.value.__cause__ is gloo


def test_an_earlier_failure_another_kind_of_error_and_a_single_learners_stay_what_they_are():
    rank = DataParallelRank(0, 2, "127.0.0.1", 29500, timeout_s=60)
    with pytest.raises(RuntimeError, match="out of memory") as raised:
        _failing_after(_learner(rank), 0.0, RuntimeError("out of memory"))
    assert not isinstance(raised.value, CollectiveTimeoutError)
    with pytest.raises(RuntimeError, match="boom") as raised:
        _failing_after(_learner(None), 0.01, RuntimeError("boom"))
    assert not isinstance(raised.value, CollectiveTimeoutError)
    with pytest.raises(torch.OutOfMemoryError):  # a RuntimeError too, but never a collective's timeout
        _failing_after(_learner(DataParallelRank(0, 2, "127.0.0.1", 29500, timeout_s=0.01)), 0.05, torch.OutOfMemoryError("oom"))
