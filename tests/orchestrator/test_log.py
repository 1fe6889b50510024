import logging

import pytest

from orchestrator.__main__ import main
from orchestrator.log import log, setup


@pytest.fixture(autouse=True)
def default_level():
    yield
    setup()  # the next test sees the defaults again


def test_progress_goes_to_stdout_and_warnings_to_stderr_with_their_level(capsys):
    setup()
    log.info("step    1/5 | reward 0.5")
    log.warning("engine %d is wedged", 3)
    log.debug("not shown by default")
    out, err = capsys.readouterr()
    assert out == "step    1/5 | reward 0.5\n"
    assert err == "warning: engine 3 is wedged\n"


def test_quiet_keeps_warnings_and_verbose_adds_debug_lines(capsys):
    setup(logging.WARNING)
    log.info("step line")
    log.warning("careful")
    assert capsys.readouterr() == ("", "warning: careful\n")
    setup(logging.DEBUG)
    log.debug("detail")
    assert capsys.readouterr().out == "detail\n"


def test_a_user_error_is_one_line_on_stderr_with_exit_code_2(capsys, tmp_path):
    assert main(["--quiet", "train", "num_generation=4", f"output_dir={tmp_path}/run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: invalid config") and "did you mean 'num_generations'?" in err
