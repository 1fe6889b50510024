"""A judge reward that kills its judge's engine once, from inside the run (test_judge_run.py): when it
first scores groups of step 3 (group ids from 16, at 8 prompts a step), it kills the engine Ray knows
by the judge's name, then asks the judge as configs/judges/judged.py does."""

import importlib.util
import os
from pathlib import Path

import ray

JUDGED = Path(__file__).resolve().parents[3] / "configs" / "judges" / "judged.py"


async def judge_says_yes_after_a_kill(prompts, completions, judges, group_id, **kwargs):
    marker = Path(os.environ["JUDGE_KILL_MARKER"])
    if min(group_id) >= 16 and not marker.exists():
        marker.write_text("killed")
        ray.kill(ray.get_actor("judge-checker-engine-0"))
    spec = importlib.util.spec_from_file_location("judged", JUDGED)
    judged = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(judged)
    return await judged.judge_says_yes(prompts, completions, judges)
