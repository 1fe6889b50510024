"""A user's file travels as the driver read it: a process loads that copy, whatever its own disk holds
at the path (nothing, or another version), once per process; errors name the config key and the file."""

import pickle
import subprocess
import sys
import traceback

import pytest

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.user_functions import resolve, ship

REWARD = "def reward(prompts, completions, **kwargs):\n    return [{value}] * len(completions)\n"


def write(folder, name: str, text: str):
    path = folder / name
    path.write_text(text)
    return path


def test_a_shipped_file_loads_from_its_source_where_the_path_no_longer_exists(tmp_path):
    path = write(tmp_path, "gone.py", REWARD.format(value=0.5))
    files = ship({f"{path}:reward": "reward_funcs"})
    path.unlink()
    fn = resolve(f"{path}:reward", "reward_funcs", {}, files)
    assert fn(["p", "q"], ["a", "b"]) == [0.5, 0.5]
    assert fn.__module__.startswith("user_gone_") and fn.__globals__["__file__"] == str(path)


def test_a_file_is_one_module_per_process(tmp_path):
    path = write(
        tmp_path,
        "counter.py",
        "CALLS = []\ndef one(x):\n    CALLS.append(x)\n    return len(CALLS)\ndef two(x):\n    return one(x)\n",
    )
    files = ship({f"{path}:one": "tools[0].fn", f"{path}:two": "tools[1].fn"})
    one, two = resolve(f"{path}:one", "tools[0].fn", {}, files), resolve(f"{path}:two", "tools[1].fn", {}, files)
    assert [one("a"), two("b"), resolve(f"{path}:one", "tools[0].fn", {}, files)("c")] == [1, 2, 3]
    assert one.__globals__ is two.__globals__
    assert resolve(f"{path}:one", "tools[0].fn", {}) is one  # unshipped in the process that read it: the same copy


def test_a_file_changed_after_the_driver_read_it_runs_as_read_in_every_process(tmp_path):
    path = write(tmp_path, "rewards.py", REWARD.format(value=1.0))
    files = ship({f"{path}:reward": "reward_funcs"})
    path.write_text(REWARD.format(value=-7.0))  # edited mid-run, or another version on another node

    assert resolve(f"{path}:reward", "reward_funcs", {}, files)(["p"], ["a"]) == [1.0]
    assert resolve(f"{path}:reward", "reward_funcs", {})(["p"], ["a"]) == [1.0]  # this process read it once
    # A fresh process (a Ray task's) that gets the files loads the shipped copy, not its disk's.
    program = (
        "import pickle, sys\n"
        "from orchestrator.contracts.user_functions import resolve\n"
        "spec, files = pickle.load(sys.stdin.buffer)\n"
        "print(resolve(spec, 'reward_funcs', {}, files)(['p'], ['a']), resolve(spec, 'reward_funcs', {})(['p'], ['a']))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", program], input=pickle.dumps((f"{path}:reward", files)), capture_output=True, check=True
    )
    assert ran.stdout.decode().split() == ["[1.0]", "[-7.0]"]  # shipped, then (unshipped) the disk's version


def test_tracebacks_show_the_shipped_lines(tmp_path):
    path = write(tmp_path, "broken.py", "def reward(prompts, completions, **kwargs):\n    raise ValueError('shipped copy')\n")
    files = ship({f"{path}:reward": "reward_funcs"})
    path.write_text("# another version\n" * 3)
    fn = resolve(f"{path}:reward", "reward_funcs", {}, files)
    with pytest.raises(ValueError) as raised:
        fn([], [])
    frame = traceback.extract_tb(raised.tb)[-1]
    assert (frame.filename, frame.lineno, frame.line) == (str(path), 2, "raise ValueError('shipped copy')")


def test_the_users_code_keeps_its_own_future_imports(tmp_path):
    path = write(tmp_path, "typed.py", "def reward(prompts: list, completions: list) -> list:\n    return []\n")
    fn = resolve(f"{path}:reward", "reward_funcs", {}, ship({f"{path}:reward": "reward_funcs"}))
    assert fn.__annotations__ == {"prompts": list, "completions": list, "return": list}  # not strings


def test_module_and_builtin_specs_ship_nothing(tmp_path):
    path = write(tmp_path, "mine.py", REWARD.format(value=1.0))
    specs = {"json:dumps": "reward_funcs", "builtin:search_call": "reward_funcs", f"{path}:reward": "reward_funcs"}
    assert list(ship(specs)) == [str(path)]


@pytest.mark.parametrize(
    ("text", "spec_name", "message"),
    [
        ("def reward(:\n", "reward", r"tools\[0\]\.fn: cannot import '.*/bad\.py' for '.*/bad\.py:reward': SyntaxError"),
        (REWARD.format(value=1.0), "nope", r"tools\[0\]\.fn: '.*/bad\.py' has no function 'nope'"),
        (
            "import my_helpers_beside_it\n",
            "reward",
            r"tools\[0\]\.fn: cannot import '.*/bad\.py' .*No module named 'my_helpers_beside_it' \(only bad\.py itself is "
            r"sent to the processes that run it: a module it imports must be installed on every node; keep helpers in "
            r"the same file\)",
        ),
    ],
    ids=["syntax-error", "no-such-function", "sibling-import"],
)
def test_errors_name_the_key_and_the_file(tmp_path, text, spec_name, message):
    path = write(tmp_path, "bad.py", text)
    files = ship({f"{path}:{spec_name}": "tools[0].fn"})
    path.unlink()
    with pytest.raises(UserError, match=message):
        resolve(f"{path}:{spec_name}", "tools[0].fn", {}, files)


def test_a_missing_file_is_refused_when_shipped_naming_the_key(tmp_path):
    with pytest.raises(UserError, match=rf"reward_funcs: file {tmp_path}/nowhere\.py does not exist"):
        ship({f"{tmp_path}/nowhere.py:reward": "reward_funcs"})


DATACLASS = """from __future__ import annotations
import dataclasses


@dataclasses.dataclass
class Score:
    value: float
    note: str = ""


def reward(prompts, completions, **kwargs) -> list[float]:
    return [Score(float(len(c))).value for c in completions]
"""


def test_a_file_with_postponed_annotations_and_a_dataclass_loads_and_its_functions_travel_by_value(tmp_path):
    """The dataclass decorator looks its class's module up in sys.modules; a Ray task's pickle of the
    function must not need that module in the process that unpickles it."""
    path = write(tmp_path, "scored.py", DATACLASS)
    fn = resolve(f"{path}:reward", "reward_funcs", {}, ship({f"{path}:reward": "reward_funcs"}))
    assert fn(["p", "q"], ["ab", "abcd"]) == [2.0, 4.0]
    assert sys.modules[fn.__module__].__file__ == str(path)
    from ray import cloudpickle

    elsewhere = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ray import cloudpickle; print(cloudpickle.loads(sys.stdin.buffer.read())([], ['abc']))",
        ],
        input=cloudpickle.dumps(fn),
        capture_output=True,
        check=False,
    )
    assert elsewhere.stdout.decode().strip() == "[3.0]", elsewhere.stderr.decode()[-2000:]


def test_a_process_given_the_drivers_files_refuses_a_file_spec_it_was_not_sent(tmp_path):
    sent, other = write(tmp_path, "sent.py", REWARD.format(value=1.0)), write(tmp_path, "other.py", REWARD.format(value=2.0))
    files = ship({f"{sent}:reward": "reward_funcs"})
    with pytest.raises(UserError, match=rf"reward_funcs: {other} was not sent with the run"):
        resolve(f"{other}:reward", "reward_funcs", {}, files)  # on this node's disk, but not the driver's to run
