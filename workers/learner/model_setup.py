"""Model and tokenizer set-up for the learner: the canonical tokenizer is decided here.

Order matters: load the tokenizer, add the configured special tokens, fall back to EOS as pad if
there is none, then load the model and resize its embeddings to the tokenizer. The tokenizer
that results is shipped to every engine.
"""

from __future__ import annotations

import logging

from orchestrator.contracts.errors import UserError

log = logging.getLogger(__name__)


class ModelSetupError(UserError):
    """The model and tokenizer cannot be used together; the message says why."""


def load_tokenizer(
    name_or_path: str,
    added_tokens: list[str],
    warn: bool = True,
    chat_template: str | None = None,
    revision: str | None = None,
):
    """The learner's tokenizer: as saved, plus `added_tokens` (special), plus the pad fallback;
    `chat_template` (the Jinja text; the driver reads a template file) replaces the saved one, so the
    tokenizer shipped to engines and saved with checkpoints renders chats as the driver did."""
    from transformers import AddedToken

    from orchestrator.contracts.tokenizer import load_tokenizer as load_as_saved

    tokenizer = load_as_saved(name_or_path, revision)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    new = [t for t in added_tokens if t not in tokenizer.get_vocab()]
    if new:
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in new], special_tokens=True)
    ensure_pad_token(tokenizer, warn)
    return tokenizer


def ensure_pad_token(tokenizer, warn: bool = True) -> None:
    """GPT-2-style tokenizers have no pad token: use EOS, with one warning line."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelSetupError("the tokenizer has neither a pad token nor an EOS token to use as pad")
        if warn:
            log.warning("tokenizer has no pad token; using EOS %r (id %d) as pad", tokenizer.eos_token, tokenizer.eos_token_id)
        tokenizer.pad_token = tokenizer.eos_token


def load_model(model, tokenizer, dtype: str = "float32", resize: bool = False, revision: str | None = None):
    """`model` may be a name (read at `revision`, a Hub commit, when pinned), a path or an already built
    model object."""
    import torch
    from transformers import AutoModelForCausalLM

    if isinstance(model, str):
        model = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype), revision=revision)
    embeddings = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > embeddings:
        if not resize:
            raise ModelSetupError(
                f"the tokenizer has {len(tokenizer)} tokens but the model's embedding has {embeddings} rows: "
                "use a matching tokenizer, or list the new tokens in added_tokens so the embeddings are resized"
            )
        model.resize_token_embeddings(len(tokenizer))
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
