import subprocess
import sys


def test_help_answers_without_ray_or_vllm():
    code = (
        "import sys, contextlib, io\n"
        "from orchestrator.__main__ import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    main(['generate', '--help'])\n"
        "assert '--stop-token-ids' in out.getvalue()\n"
        "heavy = [m for m in ('ray', 'vllm', 'torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_bad_input_fails_before_ray_with_a_clear_message(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": ""}\n')
    out = tmp_path / "out.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "generate", "--prompts", str(bad), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert f"error: {bad}:2: empty prompt" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()
