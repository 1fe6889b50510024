import math

import pytest

from orchestrator.contracts.errors import UserError
from orchestrator.rewards.functions import RewardError, resolve, score, ship


def test_file_module_and_builtin_specs(tmp_path):
    reward_file = tmp_path / "my_reward.py"
    reward_file.write_text(
        "def length(prompts, completions, completion_ids, **kw):\n    return [len(c) for c in completion_ids]\n"
    )
    scores = score(
        [f"{reward_file}:length", "builtin:search_call"],
        [0.5, 1.0],
        ["Q: what is apple ? A:"] * 2,
        [" <search> apple </search>", "x"],
        [[1, 2, 3], [4]],
    )
    assert scores[f"rewards/{reward_file}:length"] == [3.0, 1.0]
    assert scores["rewards/builtin:search_call"] == [1.0, 0.0]
    assert scores["reward"] == [2.5, 0.5]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope.py:f", "file nope.py does not exist"),
        ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
        ("json:no_such_function", "has no function 'no_such_function'"),
        ("builtin:nope", "unknown built-in 'builtin:nope'"),
        ("just_a_name", "'just_a_name' is a reward model"),  # no ':NAME': TRL's convention, a model id
    ],
)
def test_bad_specs_are_named(spec, message):
    with pytest.raises(UserError, match=message):
        resolve(spec)


def test_bad_return_values_name_the_function_and_sample(tmp_path):
    reward_file = tmp_path / "bad.py"
    reward_file.write_text(
        "def short(prompts, completions, **kw):\n    return [1.0]\n"
        "def nan(prompts, completions, **kw):\n    return [0.0, float('nan')]\n"
        "def inf(prompts, completions, **kw):\n    return [float('-inf'), 1.0]\n"
    )
    with pytest.raises(RewardError, match=r"'.*bad.py:short' returned 1 values for 2 samples"):
        score([f"{reward_file}:short"], None, ["a", "b"], ["x", "y"], [[1], [2]])
    with pytest.raises(RewardError, match=r"'.*bad.py:nan' returned nan for sample 1 \(of 1 not finite\)"):
        score([f"{reward_file}:nan"], None, ["a", "b"], ["x", "y"], [[1], [2]])
    with pytest.raises(RewardError, match=r"'.*bad.py:inf' returned -inf for sample 0 .*return a finite number"):
        score([f"{reward_file}:inf"], None, ["a", "b"], ["x", "y"], [[1], [2]])


def test_a_raising_reward_names_the_function_and_the_sample(tmp_path):
    reward_file = tmp_path / "flaky.py"
    reward_file.write_text(
        "def picky(prompts, completions, **kw):\n"
        "    return [1.0 / (len(c) - 3) for c in completions]\n"  # ZeroDivisionError on 3-character completions
    )
    args = ([f"{reward_file}:picky"], None, ["p"] * 3, ["long one", "abc", "x"], [[1], [2], [3]])
    with pytest.raises(
        RewardError, match=r"raised ZeroDivisionError: .* on sample 1 \(group_id 7, sample_index 1, completion 'abc'\)"
    ):
        score(*args, group_id=[7, 7, 7], sample_index=[0, 1, 2])
    scored = score(*args, error_score=-1.0, group_id=[7, 7, 7], sample_index=[0, 1, 2])
    assert scored["reward"] == [0.2, -1.0, -0.5]
    assert scored["reward_errors"] == 1


def test_a_reward_error_in_the_ray_task_reaches_the_user_as_itself(ray_session, tmp_path):
    """Rewards run in a Ray task; their failure must come back as the named error, not a Ray traceback."""
    import ray

    from orchestrator.rewards.scoring import unwrap

    reward_file = tmp_path / "boom.py"
    reward_file.write_text("def boom(prompts, completions, **kw):\n    raise ValueError('no score for you')\n")
    ref = ray.remote(score).options(num_cpus=0).remote([f"{reward_file}:boom"], None, ["p"], ["c"], [[1]])
    with pytest.raises(RewardError, match="raised ValueError: no score for you on sample 0"):
        unwrap(ref)


def test_a_reward_task_runs_the_drivers_copy_of_the_reward_file(tmp_path):
    reward_file = tmp_path / "shipped_reward.py"
    reward_file.write_text("def length(prompts, completions, **kw):\n    return [len(c) for c in completions]\n")
    files = ship([f"{reward_file}:length"])
    reward_file.unlink()  # a node that never had the file
    scores = score([f"{reward_file}:length"], None, ["p", "q"], ["ab", "abcd"], [[1], [2]], user_files=files)
    assert scores["reward"] == [2.0, 4.0]


def test_an_agents_reward_and_its_failed_sessions():
    """builtin:agent_reward scores what each agent returned; a failed session scores reward_error_score
    whatever the functions gave it, or stops the run naming the session."""
    args = dict(prompts=["p"] * 3, completions=["a", "b", "c"], completion_ids=[[1]] * 3, agent_reward=[1.0, None, 0.5])
    errors = [None, "session g0-s1: the agent raised ValueError: no", None]
    scores = score(["builtin:agent_reward"], None, error_score=-1.0, sample_errors=errors, **args)
    assert scores["reward"] == [1.0, -1.0, 0.5] and scores["reward_errors"] == 1
    with pytest.raises(RewardError, match=r"session g0-s1: the agent raised ValueError: no \(set reward_error_score"):
        score(["builtin:agent_reward"], None, sample_errors=errors, **args)


def test_a_function_of_some_rows_is_called_on_them_alone_and_is_nan_elsewhere(tmp_path):
    reward = tmp_path / "rows.py"
    reward.write_text(
        "def length(prompts, completions, **kw):\n    return [float(len(c)) for c in completions]\n"
        "def seen(prompts, completions, group_id, **kw):\n    assert group_id == [1, 1], group_id\n    return [10.0, 20.0]\n"
    )
    specs = [f"{reward}:length", f"{reward}:seen"]
    scores = score(
        specs, [1.0, 2.0], ["p"] * 3, ["a", "bb", "ccc"], [[1]] * 3, group_id=[0, 1, 1], rows_of={specs[0]: [0], specs[1]: [1, 2]}
    )
    assert scores[f"rewards/{specs[0]}"][0] == 1.0 and math.isnan(scores[f"rewards/{specs[0]}"][1])
    assert math.isnan(scores[f"rewards/{specs[1]}"][0]) and scores[f"rewards/{specs[1]}"][1:] == [10.0, 20.0]
    assert scores["reward"] == [1.0, 20.0, 40.0]
    nothing = score(specs, None, ["p"], ["a"], [[1]], group_id=[0], rows_of={specs[0]: [0], specs[1]: []})
    assert nothing["reward"] == [1.0] and math.isnan(nothing[f"rewards/{specs[1]}"][0])  # a function with no rows is not called
