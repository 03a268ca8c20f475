"""The langgraph-team example recorded through OpenTelemetry instead of ``instrument``: the
same team (not instrumented), traced by OpenInference's LangChain instrumentation, its spans
turned into each case's steps by ``oloproof.otel.OloproofSpanProcessor``
(``system.callable: spans:SpanDesk``).

Needs ``pip install 'oloproof[langgraph,otel]' openinference-instrumentation-langchain``.
Importing this module traces every LangChain run in the process (the instrumentation patches
LangChain's callback manager): do not import it beside an instrumented graph you record, or
each call would be recorded twice.
"""

from __future__ import annotations

from app import Desk, build_team
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from oloproof import system
from oloproof.otel import OloproofSpanProcessor

provider = TracerProvider()
provider.add_span_processor(OloproofSpanProcessor())
LangChainInstrumentor().instrument(tracer_provider=provider)


@system(name="langgraph-team", version="1.0", records=("agent_trajectory/v1", "environment_state/v1"))
class SpanDesk(Desk):
    """The correct team, recorded from its spans."""

    team = build_team()
