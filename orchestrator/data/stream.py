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


class MixedStream:
    """Several sources' prompts in one stream, each drawn at its ratio (weighted sources).

    Which source position p draws from depends only on the ratios: the source furthest below its share
    of the first p + 1 draws (ties: the first listed), so after any number of draws every source is
    within one prompt of its share. Within a source, its k-th draw is position k of its own seeded
    stream (a fresh shuffle per epoch of that source's rows). The whole stream is a function of the
    position, so a run that stops at position p resumes by starting it at p, as `PromptStream` does.
    """

    def __init__(self, prompts: list[str], rows: list[list[int]], ratios: list[float], seed: int, position: int = 0):
        """`rows[s]`: the indices in `prompts` of source s's rows; `ratios[s]`: its share (normalised)."""
        if len(rows) != len(ratios) or not all(rows) or min(ratios) <= 0:
            raise ValueError("every source needs rows and a positive ratio")
        self.prompts = prompts
        self.shares = [ratio / sum(ratios) for ratio in ratios]
        # Each source's own stream runs over its row indices: the items it yields are indices into `prompts`.
        self._sources = [PromptStream(source_rows, seed * 1_000_003 + 7_919 * s) for s, source_rows in enumerate(rows)]
        self._position = 0
        self.position = position

    @property
    def position(self) -> int:
        return self._position

    @position.setter
    def position(self, position: int) -> None:
        """Move to `position` (a resume, a rewind): each source's own stream to its draws before it."""
        counts = draws(self.shares, position)
        for stream, count in zip(self._sources, counts):
            stream.position = count
        self._position = position

    def take(self, count: int) -> list[StreamItem]:
        items = []
        counts = [stream.position for stream in self._sources]
        for _ in range(count):
            source = next_source(self.shares, counts, self._position)
            index = int(self._sources[source].take(1)[0].prompt)
            counts[source] += 1
            items.append(StreamItem(self._position, index, self.prompts[index]))
            self._position += 1
        return items


def next_source(shares: list[float], counts: list[int], position: int) -> int:
    """The source that draw `position` takes from: the furthest below its share of `position + 1` draws."""
    return max(range(len(shares)), key=lambda s: (shares[s] * (position + 1) - counts[s], -s))


def draws(shares: list[float], position: int) -> list[int]:
    """How many of the first `position` draws each source gave."""
    counts = [0] * len(shares)
    for step in range(position):
        counts[next_source(shares, counts, step)] += 1
    return counts


def prompt_stream(data, seed: int, position: int = 0) -> PromptStream | MixedStream:
    """The stream of a run's prompts (`data`: its PromptSet): drawn by ratio from weighted sources, else one."""
    if data.sources is None:
        return PromptStream(data.prompts, seed, position)
    return MixedStream(data.prompts, data.sources.rows, data.sources.ratios, seed, position)
