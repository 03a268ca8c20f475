"""Framework integrations (SPEC §18.4): ``instrument(obj)`` routes a framework agent's tool
calls and model calls through Oloproof's recorder, with no ``@tool`` written by the user.

One module per framework, each behind its extra and importing its framework only when used:

* :mod:`oloproof.integrations.pydantic_ai` — ``instrument(agent)`` (``oloproof[pydantic-ai]``)
* :mod:`oloproof.integrations.openai_agents` — ``instrument(agent)`` (``oloproof[openai-agents]``)
* :mod:`oloproof.integrations.langgraph` — ``instrument(graph)`` (``oloproof[langgraph]``)

What they share lives here and imports no framework:

* :func:`route` / :func:`aroute` — one call through the recorder of the case in progress, as
  ``@tool`` makes it: recorded inside a case (a ``tool_call`` and a ``tool_result`` step, or a
  model call's one ``decision``), answered from the tape in control and fault replays and in
  prefix runs, faultable by a case's declared fault and ``replay --fault``. Outside a case the
  framework's own function runs untouched.
* :func:`switch_to` — the agent in control. Every routed call names the agent that made it;
  when control passes from one agent to another (a framework's handoff, or a nested agent
  called from a tool) a ``handoff`` step is recorded, once, at the moment it passes.
* :func:`declare` — what :func:`instrument` routes, marked on the instrumented object so that
  the tool names ``oloproof.yaml`` and the cases use are checked against them (SPEC §18.1).

A model call's request and response are framework objects, not JSON: each integration passes
a :class:`~oloproof.system.ToolCodec` that records them as JSON and rebuilds the response from
the tape (the framework's own pydantic models, round-tripped). ``@tool(kind="model",
encode=…, decode=…)`` is the same hook for any other client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from oloproof.recorder.case import ROUTED
from oloproof.system import _AGENT, _CURRENT, ToolCodec

__all__ = ["ToolCodec", "aroute", "declare", "route", "switch_to"]



def _true() -> bool:
    return True

def switch_to(agent: str | None) -> None:
    """``agent`` takes control in the case in progress: a ``handoff`` step from the agent that
    had it, when another one did (nothing outside a case, or when it already has it). Steps
    recorded afterwards with no agent of their own (a ``@tool`` call, ``current_case().final``)
    name it."""
    rec = _CURRENT.get()
    if rec is not None and agent is not None:
        rec.take_control(agent)


def route(name: str, fn: Callable[..., Any], args: tuple = (), kwargs: dict[str, Any] | None = None, *,
          arguments: dict[str, Any] | msgspec.Raw, kind: str = "tool", codec: ToolCodec | None = None,
          agent: str | None = None) -> Any:
    """Call ``fn(*args, **kwargs)`` as the tool (or, ``kind="model"``, the model call) ``name``
    of ``agent``, through the recorder of the case in progress; ``arguments`` is what is
    recorded and matched against the tape: JSON data, or its bytes already encoded
    (``msgspec.Raw``, stored as they are). Outside a case: ``fn`` as is."""
    kwargs = kwargs or {}
    rec = _CURRENT.get()
    if rec is None:
        return fn(*args, **kwargs)
    rec.extra(ROUTED, _true)  # the span processor then leaves this case to the integration
    switch_to(agent)
    token = _AGENT.set(agent) if agent is not None else None
    try:
        return rec.call_tool(name, fn, args, kwargs, arguments, kind, codec)
    finally:
        if token is not None:
            _AGENT.reset(token)


async def aroute(name: str, fn: Callable[..., Awaitable[Any]], args: tuple = (),
                 kwargs: dict[str, Any] | None = None, *, arguments: dict[str, Any] | msgspec.Raw,
                 kind: str = "tool", codec: ToolCodec | None = None, agent: str | None = None) -> Any:
    """:func:`route` for an ``async`` function: the same steps."""
    kwargs = kwargs or {}
    rec = _CURRENT.get()
    if rec is None:
        return await fn(*args, **kwargs)
    rec.extra(ROUTED, _true)
    switch_to(agent)
    token = _AGENT.set(agent) if agent is not None else None
    try:
        return await rec.acall_tool(name, fn, args, kwargs, arguments, kind, codec)
    finally:
        if token is not None:
            _AGENT.reset(token)


class _Declared:
    """A routed tool or model call as the tool-name check and the prefix surface see it."""

    def __init__(self, name: str, kind: str, schema: Any, doc: str | None) -> None:
        self.__oloproof_tool__ = {"name": name, "kind": kind, "schema": schema}
        self.__doc__ = doc

    def __call__(self) -> None:  # inspect.signature() needs a callable; never called
        raise TypeError("a declaration, not the tool")


def declare(obj: Any, name: str, *, kind: str = "tool", schema: Any = None, doc: str | None = None) -> None:
    """Mark ``name`` as a tool (``kind="model"``: a model call) that ``obj`` routes through the
    recorder, with the JSON ``schema`` the framework shows the model. An instrumented object
    at module level of the system's project declares its tools to the tool-name check."""
    tools = getattr(obj, "__dict__", {}).get("__oloproof_tools__")
    if tools is None:
        tools = {}
        try:
            setattr(obj, "__oloproof_tools__", tools)  # noqa: B010 - a dunder name, set on any object
        except (AttributeError, TypeError):  # no attribute can be set: the names are checked after the run
            return
    tools[name] = _Declared(name, kind, schema, doc)
