"""The dependency trace of one recorded case: which later steps read what an earlier step
wrote or returned (SPEC §14: the first unacceptable step is the one that *explains* the later
failures, and a step can only explain what its effects reached).

A trace is a graph over the case's steps whose links always point forward in time. A link
says how an effect of its source step reached its target step:

* ``returned`` — a tool call and its result (the call's answer is what came back);
* ``decided`` — a model decision and the actions that follow it until the same agent's next
  decision (a tool call, message, handoff or final answer: the decision chose them);
* ``read`` — a later step's recorded content (a decision's request, a call's arguments, a
  message, a final answer) holds an earlier result or decision output: the value itself
  anywhere inside it, or, inside a text, one of its distinctive texts (8 characters or
  more) — a chat request that renders a tool result as text still shows what it read;
* ``state`` — a tool call changed a place of the environment state (read from the
  checkpoints the record holds before each call, and the state the case left) and a later
  tool result shows the value written there;
* ``assumed`` — what the record cannot show is assumed, never left out: in a case that
  recorded no model decision, the agent's control flow is invisible, so every step is taken
  to read the one before it (and so everything before it); a result too plain to trace by
  its content (``true``, ``"ok"``, ``[]``, a small count) is taken to be read by the next
  model decision.

What a tool reads of the state is invisible unless its result shows it; the trace does not
guess it. A step's *writes* are the state paths that changed between the checkpoint before
it and the next snapshot of the state (only tool calls change the sandbox: when a window
between two snapshots holds several calls, each of them may have written its changes).

Everything is linear in the size of the record, except the textual reads, which are bounded
(:data:`TEXT_BUDGET`; past it, the results not yet traced fall back to ``assumed``). Values
are walked iteratively: a deeply nested value cannot exhaust the stack.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oloproof.events import StepRecorded, canonical_json

#: how far the textual search for reads may go (characters scanned, summed over readers)
TEXT_BUDGET = 20_000_000
#: the shortest text that is taken as a trace of a value when found inside another text
MIN_TEXT = 8
#: changed paths kept per window between two state snapshots (more: the whole state changed)
MAX_WRITES = 200
#: the order links are preferred in when a step is reached by several
OBSERVED = ("returned", "decided", "read", "state")
_RANK = {how: i for i, how in enumerate(OBSERVED)}

ACTION_KINDS = ("tool_call", "message", "final", "handoff")
_READERS = ("decision", "tool_call", "message", "final", "handoff", "observation")

Path = tuple[str, ...]


@dataclass(frozen=True)
class Link:
    """An effect of step ``source`` reaching step ``target`` (``how``: see the module)."""

    source: int
    target: int
    how: str

    @property
    def assumed(self) -> bool:
        """Whether the record did not show this link (it was assumed)."""
        return self.how == "assumed"


@dataclass(frozen=True)
class Reach:
    """The steps an effect of ``start`` reached, each with the link it was first reached by."""

    start: int
    via: Mapping[int, Link]

    def __contains__(self, step: object) -> bool:
        return step == self.start or step in self.via

    def chain(self, target: int) -> list[Link]:
        """The links from ``start`` to ``target`` (empty when it is ``start`` or not reached)."""
        out: list[Link] = []
        while target != self.start and target in self.via:
            link = self.via[target]
            out.append(link)
            target = link.source
        return out[::-1]

    def observed(self, target: int) -> bool:
        """Whether ``target`` is reached by links the record shows (none assumed)."""
        return target in self and not any(link.assumed for link in self.chain(target))


# ---- fingerprints of values ----------------------------------------------------------------

def _scalar_key(v: Any) -> tuple[Any, ...]:
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", float(v))
    if isinstance(v, str):
        return ("s", v)
    return ("z", repr(v)[:200]) if v is not None else ("z",)


def fingerprints(value: Any, out: set[int] | None = None, texts: list[str] | None = None) -> int:
    """A structural fingerprint of ``value`` (equal JSON values, equal fingerprints; key order
    and ``1`` versus ``1.0`` do not matter). Every sub-value's fingerprint is added to ``out``
    and every text leaf to ``texts`` when they are given."""
    stack: list[tuple[Any, bool]] = [(value, False)]
    done: list[int] = []
    while stack:
        v, expanded = stack.pop()
        if isinstance(v, Mapping):
            if not expanded:
                stack.append((v, True))
                stack.extend((v[k], False) for k in reversed(list(v)))
                continue
            n = len(v)
            children = done[len(done) - n:] if n else []
            del done[len(done) - n:]
            fp = hash(("d", tuple(sorted(zip((str(k) for k in v), children)))))
        elif isinstance(v, (list, tuple)):
            if not expanded:
                stack.append((v, True))
                stack.extend((x, False) for x in reversed(v))
                continue
            n = len(v)
            children = done[len(done) - n:] if n else []
            del done[len(done) - n:]
            fp = hash(("l", tuple(children)))
        else:
            fp = hash(_scalar_key(v))
            if texts is not None and isinstance(v, str) and len(v) >= MIN_TEXT:
                texts.append(v)
        if out is not None:
            out.add(fp)
        done.append(fp)
    return done[-1]


def _small(v: Any) -> bool:
    """A leaf that says too little to trace: None, a boolean, a short text, a small count."""
    if v is None or isinstance(v, bool):
        return True
    if isinstance(v, str):
        return len(v) < 4
    if isinstance(v, (int, float)):
        return float(v).is_integer() and abs(v) < 10
    return False


def informative(value: Any) -> bool:
    """Whether ``value`` holds a leaf distinctive enough to recognise it where it is read."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Mapping):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif not _small(v):
            return True
    return False


def _text_leaves(value: Any) -> list[str]:
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Mapping):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, str) and len(v) >= MIN_TEXT:
            out.append(v)
    return out


# ---- state windows ---------------------------------------------------------------------------

#: no value: the place did not exist before, or no longer exists after
ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()


def changed_paths(before: Any, after: Any, limit: int = MAX_WRITES) -> list[Change] | None:
    """The places where ``after`` differs from ``before`` (paths of keys and list indexes, as
    text), each with its old and new value; None when more than ``limit`` changed."""
    out: list[Change] = []
    stack: list[tuple[Path, Any, Any]] = [((), before, after)]
    while stack:
        path, a, b = stack.pop()
        if a is b or (type(a) is type(b) and isinstance(a, (dict, list)) and a == b
                      and canonical_json(a) == canonical_json(b)):
            continue  # an unchanged subtree, compared at C speed (== alone takes true for 1, 1 for 1.0)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            for k in reversed(list(dict.fromkeys([*a, *b]))):
                stack.append(((*path, str(k)), a.get(k, ABSENT), b.get(k, ABSENT)))
            continue
        if isinstance(a, list) and isinstance(b, list):
            for i in reversed(range(max(len(a), len(b)))):
                stack.append(((*path, str(i)), a[i] if i < len(a) else ABSENT, b[i] if i < len(b) else ABSENT))
            continue
        if a is not ABSENT and b is not ABSENT and type(a) is type(b) and a == b:
            continue
        out.append(Change(path, a, b))
        if len(out) > limit:
            return None
    return out


@dataclass(frozen=True)
class Change:
    """A place of the state that changed: its path, and its value before and after
    (:data:`ABSENT` where there was none)."""

    path: Path
    old: Any
    new: Any


def _at(value: Any, rest: Path) -> bool:
    """Whether ``value`` holds a place at the relative path ``rest``."""
    for seg in rest:
        if isinstance(value, Mapping):
            if seg not in value:
                return False
            value = value[seg]
        elif isinstance(value, list) and seg.isdigit() and int(seg) < len(value):
            value = value[int(seg)]
        else:
            return False
    return value is not ABSENT


def _touches(change: Change, path: Path) -> bool:
    """Whether ``change`` wrote ``path``: the same place, a place inside it, or a place above
    it whose old or new value holds it (a list written with one item did not write its
    second: that one was never there)."""
    n = len(change.path)
    if path[:n] != change.path[:len(path)]:
        return False
    if n < len(path):
        return _at(change.old, path[n:]) or _at(change.new, path[n:])
    return True


@dataclass(frozen=True)
class Window:
    """Between the state snapshot before step ``start`` and the one before step ``stop``: the
    steps that may have written there and what changed (``paths`` None: too much to list)."""

    start: int
    stop: int
    writers: tuple[int, ...]
    paths: tuple[Change, ...] | None


# ---- the trace -------------------------------------------------------------------------------

class Trace:
    """The dependency trace of a case's steps (see the module docstring).

    Args:
        steps: the case's steps, in order (1-based ``index``).
        states: the environment state snapshots the record holds, as ``(before_step, state)``
            (the initial state before step 1, the checkpoints, the state the case left after
            its last step, i.e. before step ``len(steps) + 1``).
    """

    def __init__(self, steps: Sequence[StepRecorded], states: Iterable[tuple[int, Any]] = ()):
        self.steps = steps
        self._into: dict[int, list[Link]] = {}
        self.assumed_control = False  # no decision recorded: the control flow is assumed
        self.snapshots = 0
        self.windows = self._windows(states)
        self.writes: dict[int, list[Change]] = {}
        for w in self.windows:
            for s in w.writers:
                self.writes.setdefault(s, []).extend(w.paths or [Change((), ABSENT, ABSENT)])
        self._build()

    @property
    def state_known(self) -> bool:
        """Whether the record holds the state at two points at least (writes can be read)."""
        return self.snapshots >= 2

    def _link(self, source: int, target: int, how: str) -> None:
        if source < target:
            self._into.setdefault(target, []).append(Link(source, target, how))

    def _windows(self, states: Iterable[tuple[int, Any]]) -> list[Window]:
        by_step: dict[int, Any] = {}
        for before, state in states:
            if state is not None:
                by_step[before] = state  # a later snapshot of the same point wins (a checkpoint over the initial state)
        marks = sorted(by_step)
        self.snapshots = len(marks)
        position = {s.index: i for i, s in enumerate(self.steps)}
        out = []
        for a, b in zip(marks, marks[1:]):
            changed = changed_paths(by_step[a], by_step[b])
            if changed == []:
                continue
            i, window = position.get(a, 0 if a <= 1 else len(self.steps)), []
            while i < len(self.steps) and self.steps[i].index < b:
                window.append(self.steps[i])
                i += 1
            writers = tuple(s.index for s in window if s.kind == "tool_call") or tuple(s.index for s in window)
            if writers:
                out.append(Window(a, b, writers, None if changed is None else tuple(changed)))
        return out

    def _build(self) -> None:
        steps = self.steps
        decisions = [s for s in steps if s.kind == "decision"]
        if not decisions:
            self.assumed_control = True
            for s in steps[1:]:
                self._link(s.index - 1, s.index, "assumed")
        # returned: a call and its result (nested calls inside a tool pair up as a stack)
        open_calls: list[StepRecorded] = []
        for s in steps:
            if s.kind == "tool_call":
                open_calls.append(s)
            elif s.kind == "tool_result" and open_calls:
                self._link(open_calls.pop().index, s.index, "returned")
        # decided: a decision and the actions it chose, until its agent's next decision
        deciding: dict[str | None, int] = {}
        for s in steps:
            if s.kind == "decision":
                deciding[s.agent] = s.index
            elif s.kind in ACTION_KINDS and s.agent in deciding:
                self._link(deciding[s.agent], s.index, "decided")
        self._reads(decisions)
        self._state_reads()
        for links in self._into.values():
            # observed links first (a chain shown to a person prefers what the record shows)
            links.sort(key=lambda link: (_RANK.get(link.how, len(_RANK)), -link.source))

    def _reads(self, decisions: list[StepRecorded]) -> None:
        """``read`` links: a value returned earlier found inside a later step's content."""
        producers: dict[int, list[int]] = {}  # fingerprint -> results (and decision outputs) with it
        texts: dict[str, int] = {}  # a distinctive text -> the first result that returned it
        plain: list[int] = []  # results too plain to trace by content
        budget = TEXT_BUDGET
        traced: set[int] = set()
        next_decision: dict[int, int | None] = {}
        following: int | None = None
        for s in reversed(self.steps):
            next_decision[s.index] = following
            if s.kind == "decision":
                following = s.index
        for s in self.steps:
            if s.kind in _READERS:
                content = s.arguments if s.kind != "final" else (s.arguments, s.result)
                found: set[int] = set()
                fingerprints(content, found)
                for fp in found & producers.keys():
                    for source in producers[fp]:
                        self._link(source, s.index, "read")
                        traced.add(source)
                if texts and budget > 0:
                    for leaf in _text_leaves(content):
                        budget -= len(leaf) * len(texts)
                        if budget <= 0:
                            break
                        for text, source in texts.items():
                            if text in leaf:
                                self._link(source, s.index, "read")
                                traced.add(source)
            value = s.result if s.kind in ("tool_result", "decision") else None
            if s.kind in ("tool_result", "decision") and value is not None:
                if informative(value):
                    producers.setdefault(fingerprints(value), []).append(s.index)
                    leaves = [value] if isinstance(value, str) and len(value) >= MIN_TEXT else _text_leaves(value)
                    for t in leaves:
                        texts.setdefault(t, s.index)
                elif s.kind == "tool_result":
                    plain.append(s.index)
        for source in plain:
            target = next_decision.get(source)
            if target is not None:
                self._link(source, target, "assumed")
        if budget <= 0:  # the textual search stopped: what it did not reach is assumed read next
            for s in self.steps:
                if s.kind == "tool_result" and s.index not in traced and s.index not in plain:
                    target = next_decision.get(s.index)
                    if target is not None:
                        self._link(s.index, target, "assumed")

    def _state_reads(self) -> None:
        """``state`` links: a later tool result shows a value an earlier call wrote."""
        written: dict[int, list[int]] = {}
        for step, paths in self.writes.items():
            for change in paths:
                if change.new is not ABSENT and informative(change.new):
                    written.setdefault(fingerprints(change.new), []).append(step)
        if not written:
            return
        for s in self.steps:
            if s.kind != "tool_result" or s.result is None:
                continue
            found: set[int] = set()
            fingerprints(s.result, found)
            for fp in found & written.keys():
                for source in written[fp]:
                    self._link(source, s.index, "state")

    # ---- questions ----------------------------------------------------------------------

    def reach(self, start: int, *, observed_only: bool = False) -> Reach:
        """Every step an effect of step ``start`` reached, each with the (preferably observed)
        link it was reached by; with ``observed_only``, only through links the record shows."""
        via: dict[int, Link] = {}
        reached = {start}
        for target in sorted(t for t in self._into if t > start):
            for link in self._into[target]:
                if link.source in reached and not (observed_only and link.assumed):
                    via[target] = link
                    reached.add(target)
                    break
        return Reach(start, via)

    def links(self) -> list[Link]:
        """Every link, by target then preference."""
        return [link for t in sorted(self._into) for link in self._into[t]]

    def writers_of(self, path: Path) -> tuple[tuple[int, ...], str]:
        """The steps that last changed ``path`` (or a place above or inside it) and how that
        is known: ``written`` (by those steps), ``never`` (the record holds the state and the
        path never changed) or ``unknown`` (the record does not hold the state)."""
        for w in reversed(self.windows):
            if w.paths is None or any(_touches(c, path) for c in w.paths):
                return w.writers, "written"
        return (), "never" if self.state_known else "unknown"


def describe_chain(chain: list[Link], most: int = 8) -> str:
    """``11 → 12 (returned) → 13 (read) → 14 (decided)``: how an effect travelled (a chain
    longer than ``most`` links keeps its ends: ``5 → 6 (returned) → … 90 more links … →``)."""
    if not chain:
        return ""
    shown = [f"{link.target} ({link.how})" for link in chain]
    if len(shown) > most:
        head, tail = most // 2, most - most // 2
        shown = [*shown[:head], f"… {len(shown) - most} more links …", *shown[-tail:]]
    return " → ".join([str(chain[0].source), *shown])
