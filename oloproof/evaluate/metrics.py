"""Per-case numbers behind quantile metrics (SPEC §5.2)."""

from __future__ import annotations

from oloproof.config.models import MetricConfig
from oloproof.evaluate.base import Verdict, missing
from oloproof.views import CaseView

TRAJECTORY_SOURCES = {"agent_steps": "steps", "agent_tool_calls": "calls"}
#: sums over the model usage a case reported (``current_case().usage``)
USAGE_SOURCES = {"cost": "", "tokens": "tokens", "latency_ms": "ms"}
#: what the recording driver observed of a case (``case_observed.v1``): wall time, calls that ran
OBSERVED_SOURCES = {"wall_ms": "ms", "model_calls": "calls", "tool_calls": "calls"}


class QuantileMetric:
    """A quantile over ``agent_steps``, ``agent_tool_calls``, the model usage a case reported
    (``cost``, ``tokens``, ``latency_ms``: summed over its ``current_case().usage`` calls;
    missing when it reported none), what the recording driver observed of the case
    (``wall_ms``, ``model_calls``, ``tool_calls``: :class:`~oloproof.events.CaseObserved`;
    missing, ``not_observed``, in logs older than that event) or a number in the output.

    A truncated trace is missing for the trajectory sources: a quantile over lower bounds is
    not a quantile. A case that raised, recorded no trajectory, or whose output lacks the
    number is missing.
    """

    def __init__(self, config: MetricConfig):
        self.config = config
        self.id = config.id
        self.q = config.quantile
        self.unit = (TRAJECTORY_SOURCES.get(config.source) or USAGE_SOURCES.get(config.source)
                     or OBSERVED_SOURCES.get(config.source, ""))

    @property
    def needs_trajectory(self) -> bool:
        """Whether the source is ``agent_steps`` or ``agent_tool_calls`` (it needs a trajectory)."""
        return self.config.source in TRAJECTORY_SOURCES

    def value(self, case: CaseView) -> float | Verdict:
        """The case's number for this metric, or a ``missing`` verdict saying why there is
        none (``system_error``/its error kind, ``no_usage_recorded``, ``no_latency_recorded``,
        ``not_observed``, ``no_trajectory_recorded``, ``truncated``, ``no_output_value``)."""
        if case.error is not None:
            return missing(case.error_kind or "system_error")
        source = self.config.source
        if source in OBSERVED_SOURCES:
            observed = case.observed
            return missing("not_observed") if observed is None else getattr(observed, source)
        if source in USAGE_SOURCES:
            if not case.usage:
                return missing("no_usage_recorded")
            if source == "cost":
                return sum(u.cost for u in case.usage)
            if source == "tokens":
                return sum(u.input_tokens + u.output_tokens for u in case.usage)
            latencies = [u.latency_ms for u in case.usage if u.latency_ms is not None]
            return sum(latencies) if latencies else missing("no_latency_recorded")
        if source in TRAJECTORY_SOURCES:
            t = case.trajectory
            if t is None:
                return missing("no_trajectory_recorded")
            if t.truncated:
                return missing("truncated")
            return len(t.steps) if source == "agent_steps" else len(t.calls)
        out = case.output
        value = out.get(source) if isinstance(out, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return missing("no_output_value")
        return value
