"""The root cause of an engine that failed to start is found in what its processes logged after the
start began, past the lines that only point at it."""

from workers.rollout.start_failure import root_cause

VLLM_OUT = """\
INFO 11-24 05:08:20 [core.py:90] Initializing a V1 LLM engine
(Worker pid=16125) ERROR 11-24 05:08:28 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=16125) ERROR 11-24 05:08:28 [multiproc_executor.py:1063]   File "cpu_attn.py", line 253, in build
(Worker pid=16125) ERROR 11-24 05:08:28 [multiproc_executor.py:1063] RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2
(EngineCore pid=16106) ERROR 11-24 05:08:28 [core.py:1512] RuntimeError: Worker failed with error 'Unsupported CPU attention configuration: head_dim=16 isa=2', please check the stack trace above for the root cause
(MainProcess pid=17460) ERROR 11-24 05:10:50 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""


def _logs(tmp_path, out: str, err: str = "", before: str = "") -> tuple:
    fds = tmp_path / "fd"
    fds.mkdir()
    (fds / "1").write_text(before + out)
    (fds / "2").write_text(before + err)
    return str(fds), {1: len(before.encode()), 2: len(before.encode())}


def test_the_first_exception_line_after_the_start_is_the_cause(tmp_path):
    earlier = "ValueError: an earlier engine's failure, before this start\n"
    fds, offsets = _logs(tmp_path, VLLM_OUT, before=earlier)
    assert root_cause(offsets, proc=fds) == "RuntimeError: Unsupported CPU attention configuration: head_dim=16 isa=2"


def test_a_traceback_on_stderr_counts_and_pointers_alone_give_nothing(tmp_path):
    err = "Traceback (most recent call last):\nValueError: To serve at least one request with the model's max seq len (32768), 0.75 GiB KV cache is needed\n"
    pointers = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    fds, offsets = _logs(tmp_path, pointers, err)
    assert root_cause(offsets, proc=fds).startswith("ValueError: To serve at least one request with the model's max seq len")
    only_pointers = tmp_path / "second"
    only_pointers.mkdir()
    fds, offsets = _logs(only_pointers, pointers)
    assert root_cause(offsets, proc=fds) is None
    assert root_cause({}, proc=fds) is None  # stdout and stderr were not files


# What a CPU engine logged when a seeded request's prefill was cut at the token budget (vLLM 0.32).
DEATH_OUT = """\
(Worker pid=2869) ERROR 11-29 01:45:38 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=2869) ERROR 11-29 01:45:38 [multiproc_executor.py:1063]   File "vllm/v1/worker/gpu_model_runner.py", line 3502, in _bookkeeping_sync
(Worker pid=2869) ERROR 11-29 01:45:38 [multiproc_executor.py:1063]     gen.set_offset(gen.get_offset() - 4)
(Worker pid=2869) ERROR 11-29 01:45:38 [multiproc_executor.py:1063] RuntimeError: CPU Generator does not use offset
(EngineCore pid=2856) ERROR 11-29 01:45:38 [core.py:1512] EngineCore encountered a fatal error.
(EngineCore pid=2856) ERROR 11-29 01:45:38 [core.py:1512] RuntimeError: Worker failed with error 'CPU Generator does not use offset', please check the stack trace above for the root cause
"""


def test_a_serving_engines_death_names_its_root_cause_and_still_counts_as_a_death(tmp_path):
    from vllm.v1.engine.exceptions import EngineDeadError

    from orchestrator.contracts.engine_death import engine_death_types, reason
    from workers.rollout.start_failure import explained_death

    served = "ValueError: a failure logged while the engine last served well\n"
    fds, offsets = _logs(tmp_path, DEATH_OUT, before=served)
    explained = explained_death(EngineDeadError(), offsets, proc=fds)
    assert isinstance(explained, engine_death_types())  # the pool replaces it and sends its groups elsewhere
    assert reason(explained) == "EngineDiedError: vLLM's engine process died: RuntimeError: CPU Generator does not use offset"
    other = ValueError("a group's own failure")
    assert explained_death(other, offsets, proc=fds) is other
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    quiet_fds, quiet_offsets = _logs(quiet, "", before=served)
    dead = EngineDeadError()
    assert explained_death(dead, quiet_offsets, proc=quiet_fds) is dead  # no cause found: vLLM's own error
