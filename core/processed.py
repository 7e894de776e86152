"""``processedEventIds`` held compactly: about one byte per event made by the event factory.

The state's ``processedEventIds`` is ``{entityKey(runId, eventId): true}`` in insertion order.
Event ids made by ``EventFactory`` are ``{runId}:{sequence}:{type}``: for those, one byte per
sequence of the run (the type's code) says the id is processed, and runs of consecutive
insertions are kept as ``[run, first, last]`` segments for the order. Any other id is kept as
its key string. :meth:`ProcessedIds.to_dict` gives back exactly the reference's dict, keys and
order; what differs is only how the engine holds it.

The engine addresses an event by a *token* (:meth:`ProcessedIds.token`): a ``(run, sequence,
code)`` tuple for a factory-shaped id, else the key string. Two events have equal tokens exactly
when their keys are equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from core.events import EVENT_TYPE_LIST
from core.keys import run_key_prefix, utf16_len

__all__ = ["ProcessedIds", "RunIds", "Token"]

#: Event type -> its code (0 means "no id at this sequence").
_CODES: Final[dict[str, int]] = {etype: i + 1 for i, etype in enumerate(EVENT_TYPE_LIST)}
_TYPES: Final[tuple[str, ...]] = ("", *EVENT_TYPE_LIST)
#: Sequences held compactly are below this (``String(n)`` has at most 15 digits).
_MAX_SEQUENCE: Final = 10**15
#: A run's code table grows to at most 2 x (its compact ids) + this many bytes; an id whose
#: sequence lies beyond is kept as a string (a far-off sequence cannot allocate much).
_SLACK: Final = 64


def _parse_sequence(text: str) -> int | None:
    """The integer written as ``String(n)`` would write it, or None."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    if len(text) > 1 and text[0] == "0":
        return None
    return int(text) if len(text) < 16 else None  # below _MAX_SEQUENCE


def _split_key(key: str) -> tuple[str, str] | None:
    """``(runId, eventId)`` of a key ``f"{len(runId)}:{runId}{eventId}"``, or None."""
    length_text, sep, rest = key.partition(":")
    if not sep or not length_text.isascii() or not length_text.isdigit():
        return None
    length = int(length_text)
    if str(length) != length_text:
        return None
    if rest.isascii():
        run_id = rest[:length]
    else:  # JavaScript lengths: count UTF-16 code units
        units = 0
        end = 0
        while units < length and end < len(rest):
            units += utf16_len(rest[end])
            end += 1
        run_id = rest[:end]
    if utf16_len(run_id) != length:
        return None
    return run_id, rest[len(run_id) :]


class RunIds:
    """One run's compact ids: a code per sequence (0: none)."""

    __slots__ = ("codes", "count", "head", "index", "run_id")

    def __init__(self, run_id: str, index: int) -> None:
        self.run_id = run_id
        self.index = index  # its number in the order segments
        self.codes = bytearray()
        self.count = 0
        self.head = f"{run_key_prefix(run_id)}{run_id}:"  # every key of the run starts so


#: A processed-id token: ``(run, sequence, code)`` for a factory-shaped id, else the key.
Token = tuple[RunIds, int, int] | str


class ProcessedIds:
    """An insertion-ordered set of processed event keys (see the module docstring)."""

    __slots__ = (
        "_base",
        "_base_removals",
        "_last",
        "_order",
        "_other",
        "_other_keys",
        "_removals",
        "_run_list",
        "_runs",
    )

    def __init__(self) -> None:
        self._runs: dict[str, RunIds] = {}
        self._run_list: list[RunIds] = []  # by index
        self._other: set[str] = set()
        self._other_keys: list[str] = []  # the string keys, in insertion order
        #: Insertion order: [run index, first sequence, last sequence], or
        #: [-1, first, last] positions in ``_other_keys``.
        self._order: list[list[int]] = []
        self._last: list[int] = [-2, 0, 0]  # the newest segment (a sentinel before any)
        self._removals = 0  # how many ``pop_last`` so far
        #: The last dict ``to_dict`` returned (the engine's snapshot holds it anyway) and
        #: ``_removals`` then: while nothing was removed, its keys are our first keys.
        self._base: dict[str, bool] | None = None
        self._base_removals = 0

    @classmethod
    def from_dict(cls, processed: Mapping[str, Any]) -> ProcessedIds:
        ids = cls()
        for key in processed:
            split = _split_key(key)
            token = key if split is None else ids.token(run_key_prefix(split[0]), *split, None, "")
            if token not in ids:
                ids.add(token)
        return ids

    # --- tokens -----------------------------------------------------------------------------

    def _run(self, run_id: str) -> RunIds:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = RunIds(run_id, len(self._run_list))
            self._run_list.append(run)
        return run

    def token(self, prefix: str, run_id: str, event_id: str, sequence: Any, etype: str) -> Token:
        """The token of ``prefix + event_id`` (``prefix`` = ``run_key_prefix(run_id)``);
        ``sequence`` and ``etype`` are the event's, a hint for the common case."""
        if (
            type(sequence) is int
            and 0 <= sequence < _MAX_SEQUENCE
            and event_id == f"{run_id}:{sequence}:{etype}"
        ):
            return (self._runs.get(run_id) or self._run(run_id), sequence, _CODES[etype])
        if event_id.startswith(run_id) and event_id[len(run_id) : len(run_id) + 1] == ":":
            seq_text, sep, etype_text = event_id[len(run_id) + 1 :].partition(":")
            code = _CODES.get(etype_text)
            seq = _parse_sequence(seq_text)
            if sep and code is not None and seq is not None:
                return (self._run(run_id), seq, code)
        return prefix + event_id

    def new_token(
        self, prefix: str, run_id: str, event_id: str, sequence: Any, etype: str
    ) -> Token | None:
        """:meth:`token`, or None when that key is already processed (one call on the hot path)."""
        if (
            type(sequence) is int
            and 0 <= sequence < _MAX_SEQUENCE
            and event_id == f"{run_id}:{sequence}:{etype}"
        ):
            run = self._runs.get(run_id) or self._run(run_id)
            code = _CODES[etype]
            codes = run.codes
            if sequence < len(codes) and codes[sequence] == code:
                return None
            compact = (run, sequence, code)
            if self._other and _key(compact) in self._other:
                return None
            return compact
        token = self.token(prefix, run_id, event_id, sequence, etype)
        return None if token in self else token

    # --- the set ------------------------------------------------------------------------------

    def __contains__(self, token: object) -> bool:
        if type(token) is tuple:
            run, seq, code = token
            codes = run.codes
            if seq < len(codes) and codes[seq] == code:
                return True
            return bool(self._other) and _key(token) in self._other
        return token in self._other

    def add(self, token: Token) -> None:
        """Insert ``token`` (not already present)."""
        if isinstance(token, tuple):
            run, seq, code = token
            codes = run.codes
            if seq >= len(codes) and seq < 2 * run.count + _SLACK:
                codes.extend(bytes(seq + 1 - len(codes)))
            if seq < len(codes) and codes[seq] == 0:
                codes[seq] = code
                run.count += 1
                last = self._last
                if last[0] == run.index and last[2] == seq - 1:
                    last[2] = seq
                else:
                    self._last = [run.index, seq, seq]
                    self._order.append(self._last)
                return
        key = _key(token) if isinstance(token, tuple) else token
        self._other.add(key)
        position = len(self._other_keys)
        self._other_keys.append(key)
        last = self._last
        if last[0] == -1 and last[2] == position - 1:
            last[2] = position
        else:
            self._last = [-1, position, position]
            self._order.append(self._last)

    def add_next(self, run: RunIds, seq: int, code: int) -> bool:
        """Add the compact token ``(run, seq, code)`` if ``seq`` is the next one of its run
        (``len(run.codes)``), as ``add`` would; else change nothing and return False.

        A stream's common case in one call: such a token is never processed yet unless it sits
        among the string keys, so this declines whenever there are any.
        """
        codes = run.codes
        if seq != len(codes) or self._other or seq >= 2 * run.count + _SLACK:
            return False
        codes.append(code)
        run.count += 1
        last = self._last
        if last[0] == run.index and last[2] == seq - 1:
            last[2] = seq
        else:
            self._last = [run.index, seq, seq]
            self._order.append(self._last)
        return True

    def pop_last(self, token: Token) -> None:
        """Remove ``token``, the last one added (a strict batch rolling back)."""
        self._removals += 1
        segment = self._order[-1]
        if segment[0] == -1:
            key = self._other_keys.pop()
            assert key == (_key(token) if isinstance(token, tuple) else token)
            self._other.discard(key)
        else:
            assert isinstance(token, tuple)
            run, seq, _code = token
            assert run.index == segment[0] and segment[2] == seq
            run.codes[seq] = 0
            run.count -= 1
        if segment[1] == segment[2]:
            self._order.pop()
            self._last = self._order[-1] if self._order else [-2, 0, 0]
        else:
            segment[2] -= 1

    # --- the state's form ---------------------------------------------------------------------

    def keys(self) -> list[str]:
        """Every key, in insertion order."""
        return self._keys_of(self._order)

    def _newest(self, count: int) -> list[str]:
        """The newest ``count`` keys, in insertion order (O(count + segments walked))."""
        segments: list[list[int]] = []
        for index, first, last in reversed(self._order):
            if count <= 0:
                break
            if last - first + 1 > count:
                first = last - count + 1
            segments.append([index, first, last])
            count -= last - first + 1
        segments.reverse()
        return self._keys_of(segments)

    def _keys_of(self, segments: list[list[int]]) -> list[str]:
        types = _TYPES
        out: list[str] = []
        for index, first, last in segments:
            if index == -1:
                out += self._other_keys[first : last + 1]
                continue
            run = self._run_list[index]
            codes, head = run.codes, run.head
            out += [f"{head}{seq}:{types[codes[seq]]}" for seq in range(first, last + 1)]
        return out

    def to_dict(self) -> dict[str, bool]:
        """``processedEventIds`` as the reference holds it (a new dict; do not mutate it).

        Built from the previous one when nothing was removed since: a C-level copy plus the
        new keys, instead of formatting every key again (see
        BENCHMARKS.md, "Costs behind the code's shortcuts").
        """
        base = self._base
        if base is None or self._base_removals != self._removals:
            out = dict.fromkeys(self.keys(), True)
        else:
            out = base.copy()
            for key in self._newest(len(self) - len(base)):
                out[key] = True
        self._base = out
        self._base_removals = self._removals
        return out

    def has_key(self, key: str) -> bool:
        """Whether the state key ``key`` is processed."""
        split = _split_key(key)
        if split is None:
            return key in self._other
        return self.token(run_key_prefix(split[0]), *split, None, "") in self

    def __len__(self) -> int:
        return len(self._other) + sum(run.count for run in self._run_list)


def _key(token: tuple[RunIds, int, int]) -> str:
    run, seq, code = token
    return f"{run.head}{seq}:{_TYPES[code]}"
