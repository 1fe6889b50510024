"""An endless, seeded stream of prompts: epochs of the prompt list, each in a fresh shuffled order.

A sample's group id is its position in this stream, so identical prompts are different groups, and
a run that stops at position p resumes by starting the stream at p.
"""

from __future__ import annotations

import dataclasses
import random


@dataclasses.dataclass(frozen=True)
class StreamItem:
    group_id: int  # position in the stream
    prompt_index: int  # position in the prompt list
    prompt: str


class PromptStream:
    def __init__(self, prompts: list[str], seed: int, position: int = 0):
        if not prompts:
            raise ValueError("the prompt stream needs at least one prompt")
        self.prompts = prompts
        self.seed = seed
        self.position = position
        self._epoch, self._cached = None, []

    def _order(self, epoch: int) -> list[int]:
        """The epoch's shuffled order, computed once per epoch (a shuffle of the whole list per item
        would make a step cost the size of the dataset)."""
        if self._epoch != epoch:
            self._epoch, self._cached = epoch, list(range(len(self.prompts)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(self._cached)
        return self._cached

    def take(self, count: int) -> list[StreamItem]:
        items = []
        for _ in range(count):
            epoch, offset = divmod(self.position, len(self.prompts))
            index = self._order(epoch)[offset]
            items.append(StreamItem(self.position, index, self.prompts[index]))
            self.position += 1
        return items
