"""Bad input to `train` fails before Ray or any engine starts: exit 2, a message naming what to fix,
no traceback, no run folder."""

import json
import subprocess
import sys

import pytest

from orchestrator.__main__ import main


@pytest.fixture
def prompts_file(tmp_path):
    def write(lines: list[str]):
        path = tmp_path / "prompts.jsonl"
        path.write_text("".join(line + "\n" for line in lines))
        return path

    return write


@pytest.fixture
def bigger_tokenizer(tiny, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny.tokenizer_dir)
    tokenizer.add_tokens(["<extra>"], special_tokens=True)
    tokenizer.save_pretrained(tmp_path / "bigger")
    return tmp_path / "bigger"


def _train(tmp_path, capsys, *overrides):
    out = tmp_path / "run"
    code = main(["train", f"output_dir={out}", *overrides])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "Traceback" not in captured.err + captured.out
    assert not out.exists(), "a failed preflight must leave no run folder"
    return captured.err


def test_unknown_key_suggests_the_close_match(tmp_path, capsys):
    assert "unknown config key 'num_generation'; did you mean 'num_generations'?" in _train(tmp_path, capsys, "num_generation=4")


def test_wrong_value_type(tmp_path, capsys):
    assert "config key 'learning_rate': Input should be a valid number" in _train(tmp_path, capsys, "learning_rate=fast")


def test_num_generations_below_two(tmp_path, capsys):
    assert "config key 'num_generations': Input should be greater than or equal to 2" in _train(
        tmp_path, capsys, "num_generations=1"
    )


def test_missing_model_and_tokenizer_paths(tmp_path, capsys, tiny):
    assert f"model path {tmp_path}/nope does not exist" in _train(tmp_path, capsys, f"model={tmp_path}/nope")
    err = _train(tmp_path, capsys, f"model={tiny.model_dir}", f"tokenizer={tmp_path}/nope")
    assert f"tokenizer path {tmp_path}/nope does not exist" in err


def test_tokenizer_larger_than_the_embedding(tmp_path, capsys, tiny, bigger_tokenizer, learner_tokenizer):
    err = _train(tmp_path, capsys, f"model={tiny.model_dir}", f"tokenizer={bigger_tokenizer}")
    vocab = len(learner_tokenizer)
    assert f"the tokenizer has {vocab + 1} tokens but the model's embedding" in err and f"vocab_size) has {vocab}" in err
    assert "added_tokens" in err


def test_prompt_file_problems_name_file_and_line(tmp_path, capsys, prompts_file):
    assert f"prompts file {tmp_path}/none.jsonl does not exist" in _train(tmp_path, capsys, f"prompts={tmp_path}/none.jsonl")
    bad = prompts_file([json.dumps({"prompt": "ok"}), '{"prompt": "broken'])
    assert f"{bad}:2: invalid JSON" in _train(tmp_path, capsys, f"prompts={bad}")
    empty = prompts_file([json.dumps({"prompt": "ok"}), json.dumps({"prompt": ""})])
    assert f"{empty}:2: empty prompt" in _train(tmp_path, capsys, f"prompts={empty}")


def test_prompt_longer_than_max_prompt_length(tmp_path, capsys, prompts_file):
    long = prompts_file([json.dumps({"prompt": "Q: what is apple ? A:"}), json.dumps({"prompt": "word " * 50})])
    err = _train(tmp_path, capsys, f"prompts={long}", "max_prompt_length=20")
    assert "prompt 1" in err and "more than max_prompt_length=20" in err and "drop_long_prompts" in err


def test_drop_long_prompts_keeps_the_rest_and_counts(prompts_file):
    from orchestrator.config.train import TrainConfig
    from orchestrator.training.preflight import preflight

    long = prompts_file([json.dumps({"prompt": "Q: what is apple ? A:"}), json.dumps({"prompt": "word " * 50})])
    checked = preflight(TrainConfig(prompts=str(long), max_prompt_length=20, drop_long_prompts=True, max_completion_length=24))
    assert checked.data.prompts == ["Q: what is apple ? A:"] and checked.dropped_prompts == 1


def test_stop_token_ids_outside_the_vocabulary(tmp_path, capsys, learner_tokenizer):
    err = _train(tmp_path, capsys, "stop_token_ids=[3, 99999]")
    last = len(learner_tokenizer) - 1
    assert f"stop_token_ids: token ids [99999] are outside the tokenizer's vocabulary (0..{last})" in err


def test_reward_function_that_cannot_be_imported(tmp_path, capsys):
    broken = tmp_path / "broken_reward.py"
    broken.write_text("import no_such_dependency_xyz\n")
    err = _train(tmp_path, capsys, f"reward_funcs=[{broken}:score]")
    assert f"cannot import '{broken}'" in err and "No module named 'no_such_dependency_xyz'" in err


def test_as_a_user_runs_it_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", "--max_stepz", "3", f"output_dir={tmp_path}/run"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "did you mean 'max_steps'?" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_prompt_plus_completion_budget_over_the_models_context(tmp_path, capsys):
    err = _train(tmp_path, capsys, "max_completion_length=300")
    assert "with 300 completion tokens that exceeds the model's context of 256" in err


def test_a_folder_without_a_tokenizer(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    err = _train(tmp_path, capsys, f"tokenizer={tmp_path}/empty")
    assert f"cannot load a tokenizer from {tmp_path}/empty" in err


def test_a_tool_that_cannot_be_imported_names_its_config_key(tmp_path, capsys):
    tools = "tools=[{name: lookup, fn: 'builtin:lokup', begin: <search>, end: </search>}]"
    assert "tools[0].fn: unknown built-in 'builtin:lokup' (built-ins: builtin:lookup)" in _train(tmp_path, capsys, tools)


def test_two_tools_with_one_end_tag_are_refused(tmp_path, capsys):
    tool = "{name: NAME, fn: 'builtin:lookup', begin: <search>, end: </search>}"
    tools = f"tools=[{tool.replace('NAME', 'a')}, {tool.replace('NAME', 'b')}]"
    assert "tools: two tools share the end '</search>'; each needs its own" in _train(tmp_path, capsys, tools)


def test_a_tool_whose_tags_are_equal_is_refused(tmp_path, capsys):
    tools = "tools=[{name: t, fn: 'builtin:lookup', begin: '|', end: '|'}]"
    assert "tool 't': begin and end are both '|'; a call needs two different tags" in _train(tmp_path, capsys, tools)


CHAT = [{"role": "user", "content": "what is apple ?"}]


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([{"content": "hi"}], "message 0 has no 'role' (expected {role, content})"),
        ([{"role": "user"}], "message 0 has no 'content' (expected {role, content})"),
        (
            [{"role": "robot", "content": "hi"}],
            "message 0 has unknown role 'robot' (expected one of system, user, assistant, tool)",
        ),
        ([], "empty conversation"),
    ],
)
def test_bad_conversations_name_file_and_line(tmp_path, capsys, prompts_file, prompt, message):
    bad = prompts_file([json.dumps({"prompt": CHAT}), json.dumps({"prompt": prompt})])
    err = _train(tmp_path, capsys, f"prompts={bad}")
    assert f"{bad}:2: {message}" in err and err.count("\n") == 1


def test_conversations_with_a_tokenizer_without_a_template_name_the_tokenizer(tmp_path, capsys, prompts_file, tiny):
    chats = prompts_file([json.dumps({"prompt": CHAT})])
    err = _train(tmp_path, capsys, f"prompts={chats}")
    assert f"the prompts are conversations but the tokenizer {tiny.tokenizer_dir} has no chat template" in err
    assert "set chat_template" in err
    assert "neither a file nor a Jinja template" in _train(
        tmp_path, capsys, f"prompts={chats}", f"chat_template={tmp_path}/none.jinja"
    )


def test_eval_prompts_are_checked_like_prompts(tmp_path, capsys, prompts_file):
    bad = prompts_file([json.dumps({"prompt": "ok"}), '{"prompt": "broken'])
    assert f"{bad}:2: invalid JSON" in _train(tmp_path, capsys, f"eval_prompts={bad}")


def test_greedy_evaluation_wants_one_generation(tmp_path, capsys):
    err = _train(tmp_path, capsys, "eval_prompts=builtin:arithmetic_eval", "eval_temperature=0", "eval_num_generations=4")
    assert "eval_temperature: 0 is greedy, which gives one completion per prompt; set eval_num_generations: 1" in err


@pytest.mark.parametrize(
    "source, message",
    [
        (None, "agent.fn: file {folder}/missing.py does not exist"),
        ("def agent(client, prompt, **columns):\n    return 1.0\n", "is not an async function"),
        (
            "async def agent(client):\n    return 1.0\n",
            "cannot be called as fn(client, prompt, answer=...) with this dataset's columns",
        ),
    ],
)
def test_an_agent_that_cannot_run_is_named_before_anything_starts(tmp_path, capsys, source, message):
    path = tmp_path / ("missing.py" if source is None else "agent.py")
    if source is not None:
        path.write_text(source)
    err = _train(tmp_path, capsys, "model=builtin:lookup", "prompts=builtin:lookup", f"agent={{fn: '{path}:agent'}}")
    assert message.format(folder=tmp_path) in err


def test_an_agent_with_tools_is_refused(tmp_path, capsys):
    tools = "tools=[{name: lookup, fn: 'builtin:lookup', begin: <search>, end: </search>}]"
    assert "agent and tools both set" in _train(tmp_path, capsys, "agent={fn: 'builtin:lookup'}", tools)


def test_an_unknown_tool_call_parser_is_named(tmp_path, capsys):
    err = _train(
        tmp_path,
        capsys,
        "model=builtin:lookup",
        "prompts=builtin:lookup",
        "agent={fn: 'builtin:lookup', tool_call_parser: hermess}",
    )
    assert "agent.tool_call_parser: vLLM has no tool-call parser 'hermess' (it has: " in err and "hermes" in err


def test_agent_deadlines_that_end_after_the_groups_are_refused(tmp_path, capsys):
    """Past rollout.request_timeout_s an engine is replaced; an agent's own deadlines must come first."""
    err = _train(
        tmp_path,
        capsys,
        "model=builtin:lookup",
        "prompts=builtin:lookup",
        "agent={fn: 'builtin:lookup', session_timeout_s: 300, call_timeout_s: 120}",
        "rollout.request_timeout_s=400",
    )
    assert "agent.session_timeout_s=300 + agent.call_timeout_s=120 must be under rollout.request_timeout_s=400" in err, err


def test_an_unknown_reasoning_gym_task_lists_close_names(tmp_path, capsys):
    err = _train(tmp_path, capsys, "prompts=reasoning_gym:basic_arithmetc")
    assert "prompts: reasoning-gym has no task 'basic_arithmetc' (did you mean basic_arithmetic, " in err
    err = _train(tmp_path, capsys, "prompts=reasoning_gym:gcd", "reasoning_gym.config.max_value=x")
    assert "reasoning_gym.config: reasoning-gym's task 'gcd' refused its config" in err


def test_weighted_sources_need_positive_ratios_and_names_of_their_own(tmp_path, capsys):
    config = tmp_path / "mix.yaml"
    config.write_text("prompts:\n  - {source: builtin:search, ratio: 0}\n  - {source: builtin:lookup}\n")
    err = _train(tmp_path, capsys, "--config", str(config))
    assert "config key 'prompts.0.ratio': Input should be greater than 0 (got 0)" in err and "prompts.str" not in err
    config.write_text("prompts:\n  - {source: builtin:search}\n  - {source: builtin:search, ratio: 2}\n")
    assert "prompts: two sources are named 'builtin_search'; give each its own name" in _train(
        tmp_path, capsys, "--config", str(config)
    )
