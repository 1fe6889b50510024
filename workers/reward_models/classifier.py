"""`SequenceClassifier`: a reward model scored as TRL's GRPOTrainer scores one. A plain class, tested
without Ray against TRL's own reward path.

TRL's convention (`GRPOTrainer.__init__` and `_calculate_rewards`, trl 1.16): the model is loaded with
`AutoModelForSequenceClassification.from_pretrained(name, num_labels=1)`; its tokenizer is the model's
own unless one is given (`reward_processing_classes`), with EOS as the pad token when it has none, and
the model's `pad_token_id` set to it (the classifier reads the last token that is not padding). A
sample's text is prompt + completion, or, for a conversation, `prompt + completion` messages through
the tokenizer's chat template (TRL's `apply_chat_template`); texts are tokenised without special
tokens and padded on the right, and the reward is `logits[:, 0]`.

TRL scores a whole step in one forward pass. Here a call's samples are sorted by length and scored in
batches of at most `max_batch_tokens` token slots, so a large step cannot run the worker out of
memory and little of each batch is padding; a sample's score does not depend on its batch (the
attention mask hides the padding), up to float rounding where kernels differ with the batch's shape.
TRL with `bf16` (its default on a GPU) runs the reward model under bf16 autocast; here it runs in
the checkpoint's dtype.
"""

from __future__ import annotations

import torch

from orchestrator.contracts.special_tokens import neutralise, neutralise_messages, special_strings


class SequenceClassifier:
    def __init__(self, model: str, tokenizer: str | None = None, max_batch_tokens: int = 8192, device: str | None = None):
        """`device`: where the model runs (default: a GPU if this process sees one)."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = AutoModelForSequenceClassification.from_pretrained(model, num_labels=1).to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer or model)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.get_text_config().pad_token_id = self.tokenizer.pad_token_id
        self._specials = special_strings(self.tokenizer)  # made plain in completions (`texts`)
        self.max_batch_tokens = max_batch_tokens

    def texts(self, prompts: list, completions: list) -> list[str]:
        """What the model reads for each sample: TRL's texts, the completions' control-token strings made
        plain (orchestrator/contracts/special_tokens.py): TRL's completions never hold them (it decodes with
        skip_special_tokens=True), so this changes no score of a completion TRL could produce."""
        from trl.data_utils import apply_chat_template, is_conversational

        specials = self._specials
        if is_conversational({"prompt": prompts[0]}):
            plain = [neutralise_messages(c, specials) for c in completions]
            return [apply_chat_template({"messages": p + c}, self.tokenizer)["text"] for p, c in zip(prompts, plain)]
        return [p + neutralise(c, specials) for p, c in zip(prompts, completions)]

    def score(self, prompts: list, completions: list) -> list[float]:
        """One reward per sample (prompt + completion), in the order given."""
        ids = self.tokenizer(self.texts(prompts, completions), add_special_tokens=False)["input_ids"]  # once
        scores = [0.0] * len(ids)
        for batch in self._batches([len(row) for row in ids]):
            rows = {"input_ids": [ids[i] for i in batch]}
            inputs = self.tokenizer.pad(rows, padding=True, padding_side="right", return_tensors="pt").to(self.device)
            with torch.inference_mode():
                logits = self.model(**inputs).logits[:, 0].float().tolist()
            for i, value in zip(batch, logits):
                scores[i] = value
        return scores

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Sample indices, shortest first, in batches whose longest length x rows fits the budget (a
        sample longer than the budget alone)."""
        batches, batch = [], []
        for i in sorted(range(len(lengths)), key=lengths.__getitem__):
            if batch and lengths[i] * (len(batch) + 1) > self.max_batch_tokens:
                batches.append(batch)
                batch = []
            batch.append(i)
        return batches + [batch] if batch else batches
