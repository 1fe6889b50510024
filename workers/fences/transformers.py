"""Every use of transformers' private code, checked against the release it was read from (5.19).

Packed micro-batches (workers/learner/packing.py) rely on transformers reading restarts of
`position_ids` as sequence boundaries when no attention mask is given (`masking_utils`:
`find_packed_sequence_indices` for sdpa and eager; flash-attention's cumulative lengths). Which of
those a model uses is its config's `_attn_implementation`, which has no public reader in 5.19
(`attention_implementation`). The learner still checks at start that a packed pass gives each
sequence's own log-probs, so a release that stopped reading the restarts would fall back to padding.

Importing this module checks the installed transformers and refuses another release: move `PINNED`
only after re-reading `_attn_implementation` and `find_packed_sequence_indices` in the new release.
"""

from __future__ import annotations

from workers.fences import releases

# pyproject.toml: transformers>=5.19,<5.20 (deploy/constraints/*.txt: transformers==5.19.0).
PINNED = "5.19"


def check_version(installed: str | None = None) -> None:
    """Raise unless `installed` (default: the imported transformers' version) is a 5.19.x release."""
    if installed is None:
        import transformers

        installed = transformers.__version__
    releases.check_series(
        "transformers", installed, PINNED, "5.20", "`_attn_implementation` and packed-sequence detection in the new release"
    )


def attention_implementation(model) -> str | None:
    """The attention implementation `model` runs ('sdpa', 'eager', 'flash_attention_2', ...)."""
    return getattr(model.config, "_attn_implementation", None)


check_version()
