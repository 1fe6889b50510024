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
