"""DAPO's soft overlong punishment, built with TRL's own function for this recipe's completion budget:
0 up to 16 tokens, falling linearly to -1 at 24 (configs/recipes/dapo.yaml's max_completion_length)."""

from trl.rewards import get_soft_overlong_punishment

overlong = get_soft_overlong_punishment(max_completion_len=24, soft_punish_cache=8)
