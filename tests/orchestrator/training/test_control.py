"""RUN_DIR/control.json as the run reads it between steps: a request is taken once; what is not one (a
file half written by hand, a count that is not a positive whole number) leaves the run as it was, with
a warning; an absurd count is held to a bound."""

import logging
import os

from orchestrator.training.control import CONTROL_FILE, MAX_ENGINES, ControlFile, write_request


def _write(path, text: str) -> None:
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))  # a new version even within the clock's tick


def test_requests_are_taken_once_and_what_is_not_one_is_warned_about_and_ignored(tmp_path, caplog):
    path = tmp_path / CONTROL_FILE
    control = ControlFile(path)
    assert control.poll() is None  # no file yet
    write_request(tmp_path, 3)
    assert control.poll() == {"engines": 3}
    assert control.poll() is None  # the same version: already applied
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        for text in ('{"engines": 4', '["engines", 4]', '{"engines": "4"}', '{"engines": 0}', '{"engines": 2.5}'):
            _write(path, text)
            assert control.poll() is None, text
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 5 and all("ignored (write requests with `python -m orchestrator scale" in w for w in warnings)
    assert "it is not JSON" in warnings[0] and 'expected {"engines": N}' in warnings[2]
    _write(path, '{"engines": 5}')
    assert control.poll() == {"engines": 5}


def test_an_absurd_engine_count_is_held_to_the_bound(tmp_path, caplog):
    control = ControlFile(tmp_path / CONTROL_FILE)
    write_request(tmp_path, 100000)
    with caplog.at_level(logging.WARNING, logger="orchestrator"):
        assert control.poll() == {"engines": MAX_ENGINES}
    assert f"100000 engines is more than a run asks for at once; using {MAX_ENGINES}" in caplog.text
