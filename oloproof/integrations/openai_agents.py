"""The OpenAI Agents SDK, recorded without a single ``@tool`` (SPEC §18.4):
``instrument(agent)`` routes an ``agents.Agent``'s function tools and model calls — and those
of every agent it can hand off to or call as a tool — through Oloproof's recorder::

    from agents import Agent, Runner, RunConfig
    from oloproof.integrations.openai_agents import instrument

    billing = Agent(name="billing", model=my_model, tools=[issue_refund])
    triage = instrument(Agent(name="triage", model=my_model, handoffs=[billing]))

    result = Runner.run_sync(triage, request, run_config=RunConfig(tracing_disabled=True))

Inside a case:

* each ``FunctionTool`` call is a ``tool_call`` and a ``tool_result`` step named after the
  agent that made it (``ToolContext.agent``), its arguments the model's JSON; a tool that
  raises is the error result (the SDK's failure policy then tells the model what it tells it);
* each model call (``Model.get_response``, or a whole ``stream_response``) is one ``decision``
  step: the request as JSON (system instructions, input items, tools, handoffs, output
  schema, model settings) and the ``ModelResponse`` (its output items, usage, ids) —
  :data:`RESPONSE_CODEC` rebuilds the SDK's own objects from the tape in replays;
* a handoff is one ``handoff`` step when the next agent starts (``AgentHooks.on_start``),
  never a tool call ``transfer_to_…``;
* the outermost run's final output is the ``final`` step and the case's status is
  ``success``; a run that raises (``MaxTurnsExceeded``, a guardrail, a tool error the tool's
  policy does not turn into text) ends ``failure`` — ``MaxTurnsExceeded`` also marks the
  trajectory truncated (the agent hit its step limit).

Outside a case the agent runs as before: each routed call checks one context variable.

What it does not see: a ``RunConfig(model=…)`` overrides every agent's model, so those calls
bypass the routing (give the agents their models instead); hosted tools (web search, file
search, code interpreter) run on the provider's side and are part of the model's response, not
separate steps; MCP tools are listed to the model but not routed.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any

import msgspec

from oloproof.integrations import ToolCodec, aroute, declare, switch_to
from oloproof.records import UnfitValue, encode_recorded
from oloproof.system import _CURRENT

try:
    from agents import Agent, AgentHooks, FunctionTool, Handoff, ModelResponse, Usage
    from agents.exceptions import MaxTurnsExceeded
    from agents.items import TResponseOutputItem, TResponseStreamEvent
    from agents.models.interface import Model
    from pydantic import BaseModel, TypeAdapter
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError(f"oloproof.integrations.openai_agents needs the OpenAI Agents SDK ({e}); "
                      "install it with: pip install 'oloproof[openai-agents]'") from e

__all__ = ["RESPONSE_CODEC", "instrument"]

#: a routed tool call is in progress in this context: an agent run started here (an agent used
#: as a tool) is nested, and its final output is not the case's
_IN_TOOL: ContextVar[bool] = ContextVar("oloproof_openai_agents_in_tool", default=False)
_ROUTED = "__oloproof_routed__"
_decode_json = msgspec.json.decode


# ---- JSON forms -------------------------------------------------------------------------------

def _hook(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    return f"<{type(value).__name__}>"


_encode_any = msgspec.json.Encoder(enc_hook=_hook).encode


def _jsonable(value: Any) -> Any:
    """``value`` as JSON data, deterministically: pydantic models (without their ``None``
    fields) and dataclasses as their fields, enums as their values; anything else by its
    type's name (never a repr, which would hold an address and make the recorded request
    differ between runs). One C encode and decode: a request is converted on every model call."""
    try:
        return _decode_json(_encode_any(value))
    except (TypeError, ValueError, OverflowError):  # a key msgspec does not take (a tuple...)
        return _slow_jsonable(value)


def _raw_json(value: Any) -> msgspec.Raw:
    """``value``'s JSON form as bytes the recorder stores as they are (one C encode, no decode
    and encode again): what a request and a response are recorded as."""
    try:
        return msgspec.Raw(_encode_any(value))
    except (TypeError, ValueError, OverflowError):
        return msgspec.Raw(_encode_any(_slow_jsonable(value)))


def _slow_jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _slow_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_slow_jsonable(v) for v in value]
    if isinstance(value, BaseModel):
        return _slow_jsonable(value.model_dump(mode="json", exclude_none=True))
    try:
        return _decode_json(_encode_any(value))
    except (TypeError, ValueError, OverflowError):
        return f"<{type(value).__name__}>"


def _tool_entry(tool: Any) -> dict[str, Any]:
    """What the model is shown of one tool."""
    if isinstance(tool, FunctionTool):
        return {"type": "function", "name": tool.name, "description": tool.description,
                "parameters": tool.params_json_schema, "strict": tool.strict_json_schema}
    return {"type": type(tool).__name__, "name": getattr(tool, "name", None)}


def _output_schema(schema: Any) -> Any:
    if schema.is_plain_text():
        return {"type": "text"}
    return {"name": schema.name(), "json_schema": schema.json_schema(), "strict": schema.is_strict_json_schema()}


def _settings(data: Any) -> dict[str, Any]:
    """The model settings that were set (their JSON form). The runner adds a
    ``prompt_cache_key`` of its own, random per run when nothing groups the runs: dropped, or
    no replay would match."""
    if not isinstance(data, dict):
        return {}
    out = {k: v for k, v in data.items() if v is not None}
    extra = out.get("extra_args")
    if isinstance(extra, dict) and "prompt_cache_key" in extra:
        extra = {k: v for k, v in extra.items() if k != "prompt_cache_key"}
        if extra:
            out["extra_args"] = extra
        else:
            del out["extra_args"]
    return out


def _request(system_instructions: Any, input: Any, model_settings: Any, tools: Any, output_schema: Any,
             handoffs: Any, previous_response_id: Any, conversation_id: Any, prompt: Any) -> msgspec.Raw:
    """One model request as recorded (and matched against the tape in replays), as JSON bytes."""
    request: dict[str, Any] = {
        "input": input,
        "tools": [_tool_entry(t) for t in tools],
        "handoffs": [{"tool_name": h.tool_name, "agent_name": h.agent_name, "description": h.tool_description,
                      "parameters": h.input_json_schema} for h in handoffs],
        "model_settings": _settings(_jsonable(model_settings)),
    }
    # what is not set is left out (a null would cost every recorded request a scan for NaN)
    for key, value in (("system_instructions", system_instructions), ("output_schema", output_schema),
                       ("previous_response_id", previous_response_id), ("conversation_id", conversation_id),
                       ("prompt", prompt)):
        if value is not None:
            request[key] = _output_schema(value) if key == "output_schema" else value
    return _raw_json(request)  # one pass over the whole request


# ---- the codec of a model call ----------------------------------------------------------------

_OUTPUT = TypeAdapter(list[TResponseOutputItem])
_USAGE = TypeAdapter(Usage)
_EVENTS = TypeAdapter(list[TResponseStreamEvent])


def _encode_response(response: Any) -> Any:
    if isinstance(response, ModelResponse):
        data: dict[str, Any] = {"output": response.output, "usage": response.usage}
        if response.response_id is not None:
            data["response_id"] = response.response_id
        if response.request_id is not None:
            data["request_id"] = response.request_id
        if response.raw_usage is not None:
            data["raw_usage"] = response.raw_usage
        return _raw_json(data)
    if isinstance(response, list):  # a streamed response: its events
        return {"events": _jsonable(response)}
    return _jsonable(response)


def _decode_response(data: Any) -> Any:
    if isinstance(data, dict) and "events" in data and "output" not in data:
        return _EVENTS.validate_python(data["events"])
    return ModelResponse(output=_OUTPUT.validate_python(data["output"]), usage=_USAGE.validate_python(data["usage"]),
                         response_id=data.get("response_id"), request_id=data.get("request_id"),
                         raw_usage=data.get("raw_usage"))


#: how a model call's response goes on the tape: a ``ModelResponse`` as ``{"output": [its
#: output items], "usage", "response_id"}`` (a streamed call as ``{"events": [...]}``), rebuilt
#: as the SDK's own objects (the ``openai`` package's pydantic output items, ``Usage``)
RESPONSE_CODEC = ToolCodec(_encode_response, _decode_response)


# ---- the routed model -------------------------------------------------------------------------

def _model_name(model: Any) -> str:
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else type(model).__name__


class _RoutedModel(Model):
    """An agent's model with its calls routed through the recorder, as that agent's."""

    def __init__(self, inner: Model | None, agent: str, name: str | None = None) -> None:
        self._inner = inner
        self._agent = agent
        #: a model given by name: resolved on first use the way a default RunConfig does
        self._name = name

    @property
    def inner(self) -> Model:
        if self._inner is None:
            from agents.models.multi_provider import MultiProvider

            self._inner = MultiProvider().get_model(self._name)
        return self._inner

    @property
    def call_name(self) -> str:
        return self._name or _model_name(self._inner)

    def __getattr__(self, name: str) -> Any:  # what a runner or provider asks the model itself
        if name.startswith("__") or name in ("_inner", "_agent", "_name"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, *, previous_response_id: Any,
                           conversation_id: Any, prompt: Any) -> Any:
        inner = self.inner
        kwargs = {"previous_response_id": previous_response_id, "conversation_id": conversation_id, "prompt": prompt}
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs, tracing)
        rec = _CURRENT.get()
        if rec is None:
            return await inner.get_response(*args, **kwargs)
        request = _request(system_instructions, input, model_settings, tools, output_schema, handoffs,
                           previous_response_id, conversation_id, prompt)
        response = await aroute(self.call_name, inner.get_response, args, kwargs, arguments=request,
                                kind="model", codec=RESPONSE_CODEC, agent=self._agent)
        _report_usage(rec, response, self.call_name)
        return response

    async def stream_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                              output_schema: Any, handoffs: Any, tracing: Any, *, previous_response_id: Any,
                              conversation_id: Any, prompt: Any) -> AsyncIterator[Any]:
        inner = self.inner
        kwargs = {"previous_response_id": previous_response_id, "conversation_id": conversation_id, "prompt": prompt}
        args = (system_instructions, input, model_settings, tools, output_schema, handoffs, tracing)
        if _CURRENT.get() is None:
            async for event in inner.stream_response(*args, **kwargs):
                yield event
            return

        async def whole() -> list[Any]:
            # one decision on the tape: the whole stream, replayed as the same events
            return [event async for event in inner.stream_response(*args, **kwargs)]

        request = _request(system_instructions, input, model_settings, tools, output_schema, handoffs,
                           previous_response_id, conversation_id, prompt)
        streamed = msgspec.Raw(bytes(request)[:-1] + b',"stream":true}')  # the request's object, one key more
        events = await aroute(self.call_name, whole, arguments=streamed, kind="model",
                              codec=RESPONSE_CODEC, agent=self._agent)
        for event in events:
            yield event

    async def _cleanup_on_run_end(self, owner: object) -> None:
        """The runner says a run that used this model ended (in a ``finally``, so an exception
        on its way out is the run's): the outermost run's failure is the case's."""
        error = sys.exc_info()[1]
        await self.inner._cleanup_on_run_end(owner)
        rec = _CURRENT.get()
        if rec is not None and isinstance(error, Exception) and not _IN_TOOL.get():
            cut = isinstance(error, MaxTurnsExceeded)
            rec.finish("failure", truncated=cut)

    async def close(self) -> None:
        """Close the wrapped model."""
        await self.inner.close()

    def get_retry_advice(self, request: Any) -> Any:
        """The wrapped model's retry advice."""
        return self.inner.get_retry_advice(request)


def _report_usage(rec: Any, response: Any, model: str) -> None:
    usage = getattr(response, "usage", None)
    tokens_in, tokens_out = getattr(usage, "input_tokens", 0), getattr(usage, "output_tokens", 0)
    if type(tokens_in) is int and type(tokens_out) is int and (tokens_in > 0 or tokens_out > 0):
        rec.usage(input_tokens=tokens_in, output_tokens=tokens_out, model=model)


# ---- routed tools -----------------------------------------------------------------------------

def _arguments(raw: Any) -> dict[str, Any]:
    """The model's JSON arguments as recorded: an object as is, anything else under
    ``input``."""
    if not isinstance(raw, str) or not raw.strip():
        return {} if not raw else {"input": _jsonable(raw)}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"input": raw}
    return value if isinstance(value, dict) else {"input": value}


def _as_recorded(value: Any) -> Any:
    """A tool's result as the tape holds it (its JSON form, keys in their order): the value the SDK gets
    live, from the tape and from a fault alike, so that the text it shows the model — ``str()``
    of a dict — is the same in the recording and in its replays."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    try:
        return _decode_json(encode_recorded(value))
    except (TypeError, ValueError, OverflowError, UnfitValue):
        return value  # not JSON: recorded (or refused) as the recorder sees fit; the SDK gets it as is


def _routed_invoker(name: str, invoke: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(invoke)
    async def routed(ctx: Any, input: Any) -> Any:
        if _CURRENT.get() is None:
            return await invoke(ctx, input)
        agent = getattr(getattr(ctx, "agent", None), "name", None)
        agent = agent if isinstance(agent, str) and agent else None

        async def call() -> Any:
            try:
                return await invoke(ctx, input)
            finally:
                # an agent run inside the tool (an agent used as a tool) took control: it
                # comes back before the result is the caller's
                switch_to(agent)

        token = _IN_TOOL.set(True)
        try:
            return _as_recorded(await aroute(name, call, arguments=_arguments(input), agent=agent))
        finally:
            _IN_TOOL.reset(token)

    setattr(routed, _ROUTED, True)
    return routed


def _route_tool(tool: FunctionTool) -> None:
    """Route ``tool``'s invocation. The SDK's own invoker applies the tool's failure policy
    around the function: the function is routed inside it, so that a tool that raises is
    recorded as the error it raised, and the model is told what the policy tells it."""
    invoker: Any = tool.on_invoke_tool
    inner = getattr(invoker, "_invoke_tool_impl", None)
    if callable(inner) and hasattr(invoker, "_on_handled_error"):
        if not getattr(inner, _ROUTED, False):
            invoker._invoke_tool_impl = _routed_invoker(tool.name, inner)
    elif not getattr(invoker, _ROUTED, False):
        tool.on_invoke_tool = _routed_invoker(tool.name, invoker)


# ---- hooks: control, the final output ---------------------------------------------------------

class _Hooks(AgentHooks):
    """An agent's hooks: the user's own, called first, then what Oloproof records."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def on_start(self, context: Any, agent: Any) -> None:
        if self.inner is not None:
            await self.inner.on_start(context, agent)
        switch_to(agent.name)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)
        rec = _CURRENT.get()
        if rec is not None and not _IN_TOOL.get():
            rec.final(output if isinstance(output, str) else _jsonable(output), agent=agent.name)
            rec.finish("success")

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)


# ---- instrument -------------------------------------------------------------------------------

def _route_handoff(h: Handoff) -> None:
    """A handoff whose target is known only when it is invoked (a custom ``Handoff``): the
    agent it returns is instrumented then."""
    invoke = h.on_invoke_handoff
    if getattr(invoke, _ROUTED, False):
        return

    @functools.wraps(invoke)
    async def routed(ctx: Any, input: Any) -> Any:
        target = await invoke(ctx, input)
        if isinstance(target, Agent):
            instrument(target)
        return target

    setattr(routed, _ROUTED, True)
    h.on_invoke_handoff = routed


def _reachable(root: Agent) -> list[Agent]:
    """``root`` and every agent it can hand off to or call as a tool, transitively."""
    out: list[Agent] = []
    seen: set[int] = set()
    todo = [root]
    while todo:
        agent = todo.pop(0)
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        out.append(agent)
        for h in agent.handoffs:
            if isinstance(h, Agent):
                todo.append(h)
            elif isinstance(h, Handoff):
                ref = h._agent_ref() if h._agent_ref is not None else None
                if isinstance(ref, Agent):
                    todo.append(ref)
        for tool in agent.tools:
            nested = getattr(tool, "_agent_instance", None)
            if isinstance(tool, FunctionTool) and isinstance(nested, Agent):
                todo.append(nested)
    return out


def instrument(agent: Agent) -> Agent:
    """Route ``agent``'s function tools and model calls, and those of every agent it hands off
    to or calls as a tool, through Oloproof's recorder; returns ``agent`` itself.

    The agents are changed in place: each ``FunctionTool``'s invocation is routed, each
    ``model`` is wrapped (a model given by name, or none, is resolved the way a default
    ``RunConfig`` resolves it: by the SDK's ``MultiProvider``, when first called), and each
    agent's ``hooks`` gain Oloproof's (the user's own still run, first). Idempotent:
    instrumenting an agent again, or one that another instrumented agent reaches, routes
    nothing twice; tools added since are routed.

    Args:
        agent: an ``agents.Agent``.

    Returns:
        The same agent.

    Raises:
        TypeError: ``agent`` is not an ``agents.Agent``.
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"oloproof.integrations.openai_agents.instrument() takes an agents.Agent, "
                        f"got {type(agent).__name__}")
    for a in _reachable(agent):
        model = a.model
        if isinstance(model, _RoutedModel):
            if model._agent != a.name:  # a renamed clone, or one wrapper given to another agent
                a.model = _RoutedModel(model._inner, a.name, model._name)
        elif isinstance(model, Model):
            a.model = _RoutedModel(model, a.name)
        elif model is None or isinstance(model, str):
            a.model = _RoutedModel(None, a.name, model or _default_model_name())
        if not isinstance(a.hooks, _Hooks):
            a.hooks = _Hooks(a.hooks)
        for h in a.handoffs:
            if isinstance(h, Handoff):
                _route_handoff(h)
        routed = a.model if isinstance(a.model, _RoutedModel) else None
        for tool in a.tools:
            if isinstance(tool, FunctionTool):
                _route_tool(tool)
                for owner in (a, agent):
                    declare(owner, tool.name, schema=tool.params_json_schema, doc=tool.description)
        if routed is not None:
            for owner in (a, agent):
                declare(owner, routed.call_name, kind="model")
    return agent


def _default_model_name() -> str:
    from agents.models import get_default_model

    return get_default_model()
