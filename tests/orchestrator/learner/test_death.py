"""Why the learner died, told from Ray's error text and its node's OOM-kill counters (no Ray here)."""

from orchestrator.learner.death import death_cause, oom_kills

SIGKILLED = (
    "The actor died unexpectedly before finishing this task.\n\tclass_name: Learner\n\tpid: 24985\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
    "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: (1) ..."
)


def test_ray_memory_monitor_kill_is_out_of_memory():
    text = SIGKILLED.replace("SYSTEM_ERROR", "NODE_OUT_OF_MEMORY")
    assert death_cause(text, None, None).startswith("out of memory: Ray's memory monitor")


def test_kernel_oom_kill_is_told_by_the_node_counter():
    cause = death_cause(SIGKILLED, {"/proc/vmstat": 3}, {"/proc/vmstat": 4})
    assert cause.startswith("out of memory: the kernel's OOM killer") and "/proc/vmstat" in cause


def test_other_kill_says_not_out_of_memory_and_what_ray_saw():
    cause = death_cause(SIGKILLED, {"/proc/vmstat": 3}, {"/proc/vmstat": 3})
    assert cause.startswith("not out of memory")
    assert "Worker unexpectedly exits with a connection error code 2" in cause
    assert "\n" not in cause


def test_without_counters_only_what_ray_saw():
    assert death_cause(SIGKILLED, None, None) == "Ray says: Worker unexpectedly exits with a connection error code 2"


def test_failed_start_names_the_error():
    text = "The actor died because of an error raised in its creation task, ray::Learner.__init__()\nOSError: no model"
    assert death_cause(text, None, None).startswith("it failed to start: ray::Learner.__init__()")


def test_oom_counters_are_read_from_vmstat_and_cgroup_files(tmp_path):
    (tmp_path / "vmstat").write_text("pgfault 10\noom_kill 7\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n")
    paths = (tmp_path / "vmstat", tmp_path / "memory.events", tmp_path / "absent")
    assert oom_kills(paths) == {str(paths[0]): 7, str(paths[1]): 1}
