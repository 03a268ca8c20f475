"""Slices: groupings of cases under which every criterion is shown again (SPEC §5.4).

Slices are descriptive and never gate. They follow the prefix rule: a truncated trace joins a
group only when its prefix decides it (``first_tool=search`` once it called search, the last
open-ended length bin once it is that long, ``repeated_action=true`` once it repeated a call;
never ``repeated_action=false``).
"""

from __future__ import annotations

from dataclasses import dataclass

from oloproof.evaluate.trajectory import repeated_call
from oloproof.views import CaseView

SIMPLE = ("first_tool", "repeated_action", "route")
BINNED = {"trajectory_length": 1, "tool_calls": 0}  # name -> lowest value of the first bin


class SliceSpecError(ValueError):
    """A slice spec that does not parse; the message names the known slices or the fix."""

    pass


def _label(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@dataclass(frozen=True)
class Slice:
    """One parsed slice spec (``metadata.<key>``, ``first_tool``, ``repeated_action``,
    ``route``, ``trajectory_length:<bounds>`` or ``tool_calls:<bounds>``): ``name`` is its
    kind, ``key`` the metadata key, ``bounds`` the declared bin bounds."""

    spec: str
    name: str
    key: str | None = None
    bounds: tuple[int, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> Slice:
        """Parse a slice spec from ``oloproof.yaml``.

        Raises:
            SliceSpecError: an empty spec, ``metadata.`` without a key, a binned slice without
                bounds or with bounds that are not increasing integers from its lowest value
                (1 steps, 0 calls), or an unknown slice.
        """
        if not isinstance(spec, str) or not spec:
            raise SliceSpecError(f"a slice must be a non-empty string, got {spec!r}")
        if spec.startswith("metadata."):
            key = spec[len("metadata."):]
            if not key:
                raise SliceSpecError("metadata.<key> needs a key, e.g. metadata.surface")
            return cls(spec, "metadata", key)
        if spec in SIMPLE:
            return cls(spec, spec)
        name, sep, rest = spec.partition(":")
        if name in BINNED:
            if not sep or not rest:
                raise SliceSpecError(f"{name} needs bounds, e.g. {name}:4,8")
            try:
                bounds = tuple(int(b) for b in rest.split(","))
            except ValueError:
                raise SliceSpecError(f"{spec!r}: bounds must be integers, e.g. {name}:4,8") from None
            low = BINNED[name]
            if bounds[0] < low or any(b2 <= b1 for b1, b2 in zip(bounds, bounds[1:])):
                raise SliceSpecError(f"{spec!r}: bounds must be increasing integers ≥ {low}")
            return cls(spec, name, None, bounds)
        known = ["metadata.<key>", *SIMPLE, *(f"{b}:<bounds>" for b in BINNED)]
        raise SliceSpecError(f"unknown slice {spec!r} (known: {', '.join(known)})")

    @property
    def needs_trajectory(self) -> bool:
        """Every slice but ``metadata.<key>`` reads the trajectory."""
        return self.name != "metadata"

    def bins(self) -> list[tuple[int, int | None, str]]:
        """A binned slice's bins as ``(low, high, label)``, the last open-ended (``high``
        None): ``trajectory_length:4,8`` gives 1–4, 5–8 and 9+."""
        out: list[tuple[int, int | None, str]] = []
        low = BINNED[self.name]
        for b in self.bounds:
            out.append((low, b, f"{self.name}={low}" if low == b else f"{self.name}={low}-{b}"))
            low = b + 1
        out.append((low, None, f"{self.name}={low}+"))
        return out

    def group(self, case: CaseView) -> str | None:
        """The group label this case joins, or None."""
        if self.name == "metadata":
            if self.key is None or self.key not in case.metadata:
                return None
            return f"{self.spec}={_label(case.metadata[self.key])}"
        t = case.trajectory
        if t is None:
            return None
        if self.name == "first_tool":
            names = t.tool_names
            if names:
                return f"first_tool={names[0]}"
            return None if t.truncated else "first_tool=(none)"
        if self.name == "route":
            # a truncated route is a prefix of wherever the agents went next: no group
            from oloproof.evaluate.multiagent import route

            r = route(t)
            return None if r is None or t.truncated else "route=" + ">".join(r)
        if self.name == "repeated_action":
            if repeated_call(t):
                return "repeated_action=true"
            return None if t.truncated else "repeated_action=false"
        count = len(t.steps) if self.name == "trajectory_length" else len(t.calls)
        for low, high, label in self.bins():
            if high is None:
                return label if count >= low else None
            if count <= high:
                return None if t.truncated else label
        return None

    def order(self, label: str) -> tuple:
        """Sort key of a group label: bins in bin order, other groups by label."""
        if self.name in BINNED:
            for i, (_, _, lab) in enumerate(self.bins()):
                if lab == label:
                    return (i, label)
        return (0, label)
