"""Pydantic AI agents recorded and replayed without ``@tool`` (SPEC §18.4):
``instrument(agent)`` routes every tool call and every model request of an existing
``pydantic_ai.Agent`` through Oloproof's recorder. Needs ``pip install 'oloproof[pydantic-ai]'``.

::

    from pydantic_ai import Agent, RunContext
    from oloproof.integrations.pydantic_ai import instrument

    billing = instrument(Agent(model, name="billing", tools=[issue_refund]))

How: inside a case, every run of the agent starts from its root capability (Pydantic AI's own
extension point) wrapped by a recording one — so whatever the agent runs is covered: tools
registered afterwards, every toolset, the model of the agent or one given to
``run(model=...)``. Outside a case the agent has no wrapper at all and runs as it would bare:

* its toolset wrapper (``get_wrapper_toolset``, a ``WrapperToolset``) routes each tool call
  (function tools and toolsets alike; output tools are the answer, not tool calls): a
  ``tool_call`` and a ``tool_result`` step, answered from the tape in replays, faultable;
* its model wrapper (``get_wrapper_model``, a ``WrapperModel`` around whichever model serves
  a request) routes each model request: one ``decision`` step named after the model, whose
  arguments are the request's messages and whose result is the ``ModelResponse``, both as
  Pydantic AI's own JSON (``ModelMessagesTypeAdapter``) with the fields that change from run to
  run left out (timestamps, run and conversation ids, provider response ids); from the tape the
  response is rebuilt as a ``ModelResponse``. Tool call ids Pydantic AI makes up at random
  (a model that gives none, as a ``FunctionModel`` may) are numbered in the case instead;
* its run hook (``wrap_run``) names the agent in control: a run of another agent hands control
  to it (one ``handoff`` step) and, when it was started inside a run (a delegating tool),
  back when it ends. The outermost run's result gives the ``final`` step (its output: text, or
  a structured output as its JSON form) and the terminal status (``success``, or ``failure``
  when the run raised).

A request records only what its model has not seen yet in this run (the messages after the
response it gave last, and the instructions when they change): the rest is on the tape already.

Steps name ``agent.name``; an agent with no name (Pydantic AI infers one from the variable
that holds it when it first runs) is named ``agent``, as Pydantic AI's own spans name it.
Inside a case, the tool calls of one model response run one after another (Pydantic AI's
``sequential`` mode), so that their steps are recorded in the order the model asked for them
and a replay meets them in that order. docs/frameworks/pydantic-ai.md says what is captured
and what is not.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Self

import msgspec
from pydantic import TypeAdapter
from pydantic_ai import Agent, RunContext
from pydantic_ai._utils import Some
from pydantic_ai.capabilities import WrapperCapability
from pydantic_ai.exceptions import ModelRetry, ToolFailed
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models import wrapper as _wrapper
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool, WrapperToolset
from pydantic_ai.usage import RequestUsage
from pydantic_core import to_jsonable_python

from oloproof.integrations import aroute, declare, switch_to
from oloproof.replay.tape import ReplayedToolError
from oloproof.system import _CURRENT, ToolCodec

__all__ = ["CODEC", "agent_name", "decode_response", "encode_messages", "encode_response", "instrument"]


class _Run:
    """One routed run of an agent: its name, and what its model was last shown — how many
    messages, the response it gave last — so that each request records only what is new to
    the model."""

    __slots__ = ("last", "name", "seen")

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen = 0
        self.last: ModelResponse | None = None


#: Pydantic AI's marker of the model it lends a wrapper it enters (see ``_RoutedModel.__aenter__``)
_BORROWED: ContextVar[Any] | None = getattr(_wrapper, "_borrowed", None)

#: the routed run that encloses the code that runs now (None: no routed run)
_RUN: ContextVar[_Run | None] = ContextVar("oloproof_pydantic_ai_run", default=None)

#: message fields that differ between two runs of a deterministic agent
_VOLATILE = ("timestamp", "run_id", "conversation_id", "provider_response_id")
#: a tool call id Pydantic AI made up (``_utils.generate_tool_call_id``: a prefix and a uuid4)
_RANDOM_ID = re.compile(r"pyd_ai_[0-9a-f]{32}")


def agent_name(agent: Any) -> str:
    """The name a step of ``agent`` is recorded under: ``agent.name``, or ``agent`` when it has
    none (the name Pydantic AI's own spans give it)."""
    return agent.name or "agent"


# ---- the codec: Pydantic AI's messages as JSON ----------------------------------------------

def _normalised(data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leave out the volatile fields, and the fields at their default (None, a zero count):
    decoding gives them back. What the parts hold (a tool's arguments, a text) is kept as is."""
    for message in data:
        for key in _VOLATILE:
            message.pop(key, None)
        _drop_unset(message)
        usage = message.get("usage")
        if isinstance(usage, dict):
            for key in [k for k, v in usage.items() if v is None or v == 0 or v == {}]:
                del usage[key]
        for part in message.get("parts", ()):
            part.pop("timestamp", None)
            _drop_unset(part)
    return data


def _drop_unset(fields: dict[str, Any]) -> None:
    for key in [k for k, v in fields.items() if v is None]:
        del fields[key]


#: one adapter per kind of message: what ``ModelMessagesTypeAdapter`` writes for each, at
#: half the cost of going through the union
_REQUEST = TypeAdapter(ModelRequest)
_RESPONSE = TypeAdapter(ModelResponse)


def _dumped(message: ModelMessage) -> dict[str, Any]:
    if isinstance(message, ModelResponse):
        return _RESPONSE.dump_python(message, mode="json")
    return _REQUEST.dump_python(message, mode="json")


def encode_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """Messages (requests and responses) as Pydantic AI's JSON (``ModelMessagesTypeAdapter``),
    without what changes from run to run: timestamps, run and conversation ids, provider
    response ids. Deterministic for a deterministic agent."""
    return _normalised([_dumped(m) for m in messages])


def encode_response(response: Any) -> Any:
    """A ``ModelResponse`` as recorded (:func:`encode_messages` of it alone); anything else as
    its JSON form."""
    if isinstance(response, ModelResponse):
        return encode_messages([response])[0]
    return to_jsonable_python(response)


def decode_response(data: Any) -> ModelResponse:
    """The ``ModelResponse`` :func:`encode_response` recorded (timestamps: now); ``data`` as
    JSON data, or its bytes (``msgspec.Raw``)."""
    if isinstance(data, msgspec.Raw):
        data = _decode_json(data)
    message = ModelMessagesTypeAdapter.validate_python([data])[0]
    if not isinstance(message, ModelResponse):
        raise TypeError(f"the recorded message is a {type(message).__name__}, not a ModelResponse")
    return message


# ---- the same JSON, written straight from the messages' fields --------------------------------
#
# Pydantic AI's type adapters serialize a message through Python hooks of its own (its tool
# results' file records, its usage's extra fields): some 20-40 µs a message. The message
# classes below are dataclasses whose JSON form, for plain JSON values, is their fields as they
# are — so a message made only of them is written from its fields with what ``_normalised``
# leaves out left out, encoded once (msgspec), and recorded as those bytes (``msgspec.Raw``:
# read canonically wherever a replay compares them). What is not plain JSON (a file, a model
# object, a NaN, a tuple...) — the bytes read back are not equal to what was written — goes
# through the type adapter as before. Each class is checked once per process against the
# adapter's JSON on its first message; a difference (another Pydantic AI) turns this off.

_encode_json = msgspec.json.Encoder().encode
_decode_json = msgspec.json.decode

#: the classes written from their fields: class -> the fields written as they are (a message's
#: parts and usage aside, what changes from run to run left out)
_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls)
               if f.name not in ("timestamp", "parts", "usage") and f.name not in _VOLATILE)
    for cls in (ModelRequest, ModelResponse, UserPromptPart, SystemPromptPart, ToolReturnPart, RetryPromptPart,
                TextPart, ToolCallPart, ThinkingPart)
}
#: the classes whose JSON was found to be the adapter's (see above)
_CHECKED: set[type] = set()
_SCALAR = (str, int, float, bool)


def _plain_part(part: Any) -> dict[str, Any] | None:
    fields = _FIELDS.get(type(part))
    if fields is None:
        return None
    out = {}
    for name in fields:
        value = getattr(part, name)
        if value is not None:
            out[name] = value
    if type(part) is ToolReturnPart and part.content is not None and not isinstance(part.content, _SCALAR):
        out["content_file_digests"] = []  # the files in it: none in plain JSON
    return out


def _plain_message(message: Any, recorded_request: bool = False) -> dict[str, Any] | None:
    """``message`` as :func:`encode_messages` writes it, from its fields (values as they are:
    see :func:`_json`), or None when it is not made of the classes above. A request as
    :func:`_request` records it when ``recorded_request``."""
    data = _from_fields(message, recorded_request)
    if data is None or _CHECKED.issuperset((type(message), *map(type, message.parts))):
        return data
    return data if _checked(message, _from_fields(message) if recorded_request else data) else None


def _from_fields(message: Any, recorded_request: bool = False) -> dict[str, Any] | None:
    cls = type(message)
    fields = _FIELDS.get(cls)
    if fields is None or cls is not ModelRequest and cls is not ModelResponse:
        return None
    parts = []
    for part in message.parts:
        data = _plain_part(part)
        if data is None:
            return None
        if not (recorded_request and data.get("part_kind") == "system-prompt"):
            parts.append(data)
    out: dict[str, Any] = {"parts": parts}
    if cls is ModelResponse:
        usage = message.usage
        if type(usage) is not RequestUsage:
            return None
        out["usage"] = {k: v for k, v in usage.__dict__.items() if v or not (v is None or v == 0 or v == {})}
    for name in fields:
        value = getattr(message, name)
        if value is not None:
            out[name] = value
    if recorded_request:
        out.pop("instructions", None)
    return out


def _checked(message: Any, data: dict[str, Any] | None) -> bool:
    """Whether ``data`` (``message`` from its fields) is what the type adapter writes: the
    first message of each class. Not plain JSON: nothing learned (the adapter writes it)."""
    written = None if data is None else _json(data)
    if written is None:
        return False
    if _decode_json(written) != _written(message):
        _FIELDS.clear()  # another Pydantic AI: the type adapter from now on
        return False
    _CHECKED.update((type(message), *map(type, message.parts)))
    return True


def _json(data: Any) -> bytes | None:
    """``data`` as JSON bytes, when it is plain JSON data (what reads back is equal to it: no
    object msgspec writes as something else, no NaN); else None."""
    try:
        written = _encode_json(data)
    except (TypeError, ValueError, OverflowError):
        return None
    return written if _decode_json(written) == data else None


def _written(message: ModelMessage) -> dict[str, Any]:
    """``message`` as the type adapter writes it (:func:`encode_messages`)."""
    return _normalised([_dumped(message)])[0]


def _encode_recorded_response(response: Any) -> Any:
    """A model call's result as recorded: a ``ModelResponse`` as its JSON bytes, written once
    (the data :func:`encode_response` makes)."""
    if isinstance(response, ModelResponse):
        data = _plain_message(response)
        written = None if data is None else _json(data)
        if written is not None:
            return msgspec.Raw(written)
    return encode_response(response)


#: how a model request and its response go on the tape
CODEC = ToolCodec(_encode_recorded_response, decode_response)


# ---- what one case knows ---------------------------------------------------------------------

class _CaseState:
    """Per case: how many tool calls the model asked for so far (the numbers given to the
    tool call ids Pydantic AI makes up)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0


def _state(rec: Any) -> _CaseState:
    return rec.extra("oloproof.pydantic_ai", _CaseState)


def _numbered(response: ModelResponse, first: int) -> ModelResponse:
    """``response`` with each made-up tool call id replaced by ``pyd_ai_call_<n>``, ``n``
    counting the case's tool calls from ``first``: the same in every recording and replay."""
    parts = list(response.parts)
    changed = False
    n = first
    for i, part in enumerate(parts):
        if isinstance(part, ToolCallPart):
            n += 1
            if _RANDOM_ID.fullmatch(part.tool_call_id):
                parts[i] = dataclasses.replace(part, tool_call_id=f"pyd_ai_call_{n}")
                changed = True
    return dataclasses.replace(response, parts=parts) if changed else response


def _jsonable(arguments: dict[str, Any]) -> dict[str, Any]:
    for value in arguments.values():
        if not isinstance(value, (str, int, float, bool, type(None))):
            return to_jsonable_python(arguments)
    return arguments


def _answer(output: Any) -> Any:
    return output if isinstance(output, str) else to_jsonable_python(output)


# ---- the wrappers ------------------------------------------------------------------------------

@dataclasses.dataclass
class _RoutedToolset(WrapperToolset[Any]):
    """Every tool call of the agent's toolsets through the recorder."""

    agent: Any = None

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: ToolsetTool[Any]) -> Any:
        call = self.wrapped.call_tool
        rec = _CURRENT.get()
        if rec is None:
            return await call(name, tool_args, ctx, tool)
        # (a call made inside another routed call — a delegate agent's tool — gets no automatic
        # checkpoint: the recorder's rule, since the tape answers the enclosing call whole)
        try:
            return await aroute(name, call, (name, tool_args, ctx, tool), arguments=_jsonable(tool_args),
                                agent=agent_name(self.agent))
        except ReplayedToolError as e:
            # the tape's answer to a call that raised: what tells Pydantic AI to retry or to
            # report the failure to the model must stay what it was when recorded
            kind, _, message = str(e).partition(": ")
            if kind == "ModelRetry":
                raise ModelRetry(message) from None
            if kind == "ToolFailed":
                raise ToolFailed(message) from None
            raise


def _request(run: _Run | None, messages: list[ModelMessage]) -> dict[str, Any] | msgspec.Raw:
    """A model request as recorded: the conversation the model has not seen in this run —
    the messages after the response it gave last (all of them on the run's first request, or
    when the history was rewritten since, by a history processor say), without the agent's
    system prompts. What came before is on the tape already, as earlier steps: recording the
    whole history again would make each request cost as much as the conversation so far.

    The agent's own configuration — its instructions and system prompts, its tools' schemas —
    is not in it: the tape answers a request by the conversation so far, so a candidate
    version with another prompt is answered from a frozen prefix up to its boundary, where
    its own model decides (SPEC §14); the tools' schemas are the system's surface."""
    new: Sequence[ModelMessage] = messages
    if run is not None and 0 < run.seen <= len(messages):
        previous = messages[run.seen - 1]
        if previous is run.last or (isinstance(previous, ModelResponse) and run.last is not None
                                    and previous.parts == run.last.parts):
            new = messages[run.seen:]
    plain = []
    for each in new:
        data = _plain_message(each, recorded_request=True)
        if data is None:
            break
        if data.get("parts") or data.get("kind") != "request":
            plain.append(data)
    else:  # each message from its fields: the request's JSON bytes, written once
        written = _json({"messages": plain})
        if written is not None:
            return msgspec.Raw(written)
    encoded = encode_messages(new)
    for message in encoded:
        if message.get("kind") == "request":
            message.pop("instructions", None)
            message["parts"] = [p for p in message.get("parts", ()) if p.get("part_kind") != "system-prompt"]
    return {"messages": [m for m in encoded if m.get("parts") or m.get("kind") != "request"]}


class _RoutedModel(WrapperModel):
    """Every request to the model through the recorder: one ``decision`` step. A streamed
    request too: inside a case its stream is read whole, and what it amounted to (a
    ``ModelResponse``) is recorded and streamed to the agent again, part by part."""

    def __init__(self, wrapped: Model, agent: Any) -> None:
        super().__init__(wrapped)
        self._agent = agent

    # Pydantic AI enters the wrapper a capability gives it around each request it serves, the
    # model it wraps lent for the while (its owner enters it, around the run): then there is
    # nothing to enter, and the marker of the loan says so — asked here without anyio's
    # current task (the loan's task is the one awaiting this: nothing here starts another).
    # Entered any other way, as a WrapperModel.
    async def __aenter__(self) -> Self:
        if _lent(self.wrapped):
            return self
        return await super().__aenter__()

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        if _lent(self.wrapped):
            return None
        return await super().__aexit__(*exc_info)

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        rec = _CURRENT.get()
        if rec is None:
            return await self.wrapped.request(messages, model_settings, model_request_parameters)

        async def ask() -> ModelResponse:
            return await self.wrapped.request(messages, model_settings, model_request_parameters)

        return await self._routed(rec, messages, ask)

    @asynccontextmanager
    async def request_stream(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                             model_request_parameters: ModelRequestParameters,
                             run_context: RunContext[Any] | None = None) -> AsyncIterator[StreamedResponse]:
        rec = _CURRENT.get()
        if rec is None:
            async with self.wrapped.request_stream(messages, model_settings, model_request_parameters,
                                                   run_context) as stream:
                yield stream
            return

        async def ask() -> ModelResponse:
            async with self.wrapped.request_stream(messages, model_settings, model_request_parameters,
                                                   run_context) as stream:
                async for _ in stream:
                    pass
                return stream.get()

        response = await self._routed(rec, messages, ask)
        yield CompletedStreamedResponse(response, model_request_parameters=model_request_parameters,
                                        replay_events=True)

    async def _routed(self, rec: Any, messages: list[ModelMessage],
                      ask: Callable[[], Awaitable[ModelResponse]]) -> ModelResponse:
        state = _state(rec)
        first = state.calls

        async def numbered() -> ModelResponse:
            response = await ask()
            return _numbered(response, first) if isinstance(response, ModelResponse) else response

        run = _RUN.get()
        arguments = _request(run, messages)
        response = await aroute(self.wrapped.model_name, numbered, arguments=arguments, kind="model", codec=CODEC,
                                agent=agent_name(self._agent))
        state.calls = first + sum(isinstance(p, ToolCallPart) for p in response.parts)
        if run is not None:
            run.seen, run.last = len(messages) + 1, response
        usage = response.usage
        rec.usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                  model=self.wrapped.model_name)
        return response


# Pydantic AI wraps each model class's own ``request`` in two coroutines (the special tokens
# its model writes restored, one budget for the file URLs a request downloads): on a wrapper
# both do nothing (it answers no request itself: the wrapped model's ``request``, wrapped alike,
# does both), so the wrapper's is the method as written.
_RoutedModel.request = inspect.unwrap(_RoutedModel.request)  # type: ignore[method-assign]


def _lent(model: Model) -> bool:
    """Whether ``model`` is the one Pydantic AI lends the wrapper it enters or exits now
    (``pydantic_ai.models.wrapper._borrowed``; False when this Pydantic AI has no such marker)."""
    marker = _BORROWED.get(None) if _BORROWED is not None else None
    return marker is not None and getattr(marker, "active", False) is True and getattr(marker, "model", None) is model


@dataclasses.dataclass
class _Recording(WrapperCapability[Any]):
    """What an instrumented agent's runs inside a case start with (see :class:`_InCase`): the
    root capability in force, wrapped — its tool calls, model requests and runs through the
    recorder, innermost (the capabilities in force wrap the routed toolset and model, and run
    around the recorded run), everything else handed on as is.

    A wrapper, not one more capability combined with the root: Pydantic AI dispatches every hook
    of a run (node, model request, tool validation and execution...) to each capability combined,
    each time with a copy of the run context — some 20 µs a call in Pydantic AI 2.68 for a
    capability that has nothing to do in them; a wrapper passes each hook on to the root as is."""

    agent: Any = None

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        if _CURRENT.get() is None:
            return self.wrapped.get_wrapper_toolset(toolset)
        routed = _RoutedToolset(toolset, agent=self.agent)
        return self.wrapped.get_wrapper_toolset(routed) or routed

    def get_wrapper_model(self, model: Model) -> Model | None:
        if _CURRENT.get() is None:
            return self.wrapped.get_wrapper_model(model)
        routed = _RoutedModel(model, self.agent)
        return self.wrapped.get_wrapper_model(routed) or routed

    async def wrap_run(self, ctx: Any, *, handler: Callable[[], Awaitable[AgentRunResult[Any]]]
                       ) -> AgentRunResult[Any]:
        if _CURRENT.get() is None:
            return await self.wrapped.wrap_run(ctx, handler=handler)

        async def recorded() -> AgentRunResult[Any]:
            return await _recorded_run(self.agent, handler)

        return await self.wrapped.wrap_run(ctx, handler=recorded)

    # the root's own event stream, not one more generator every event of the run passes through
    @property
    def has_wrap_run_event_stream(self) -> bool:
        return self.wrapped.has_wrap_run_event_stream

    def wrap_run_event_stream(self, ctx: RunContext[Any], *, stream: AsyncIterable[AgentStreamEvent]
                              ) -> AsyncIterable[AgentStreamEvent]:
        return self.wrapped.wrap_run_event_stream(ctx, stream=stream)


async def _recorded_run(agent: Any, handler: Callable[[], Awaitable[AgentRunResult[Any]]]) -> AgentRunResult[Any]:
    """One run of ``agent`` inside a case: it has control while it runs; the outermost run's
    result is the case's ``final`` step and status."""
    rec = _CURRENT.get()
    if rec is None:
        return await handler()
    name = agent_name(agent)
    enclosing = _RUN.get()
    outer = None if enclosing is None else enclosing.name
    token = _RUN.set(_Run(name))
    switch_to(name)
    try:
        with ToolManager.parallel_execution_mode("sequential"):
            result = await handler()
    except Exception:
        if outer is None:
            rec.finish("failure")
        else:
            switch_to(outer)
        raise
    finally:
        _RUN.reset(token)
    if outer is None:
        rec.final(_answer(result.output), agent=name)
        rec.finish("success")
    else:
        switch_to(outer)  # a delegate's run is over: the agent that ran it has control again
    return result


# ---- instrument --------------------------------------------------------------------------------

class _LiveDeclarations(dict):
    """An instrumented agent's ``__oloproof_tools__`` (see :func:`oloproof.integrations.declare`):
    read again from the agent's function toolsets each time the tool-name check reads it, so a
    tool registered after :func:`instrument` is declared too."""

    def __init__(self, agent: Any) -> None:
        super().__init__()
        self.agent = agent

    def items(self) -> Any:
        _declare_tools(self.agent)
        return super().items()

    def keys(self) -> Any:
        _declare_tools(self.agent)
        return super().keys()

    def __iter__(self) -> Any:
        _declare_tools(self.agent)
        return super().__iter__()


def _declare_tools(agent: Any) -> None:
    leaves: list[AbstractToolset[Any]] = []
    for toolset in agent.toolsets:
        toolset.apply(leaves.append)
    for leaf in leaves:
        if isinstance(leaf, FunctionToolset):
            for tool_name, tool in leaf.tools.items():
                definition = tool.tool_def
                declare(agent, tool_name, schema=definition.parameters_json_schema, doc=definition.description)
    model = agent.model
    if isinstance(model, Model):
        declare(agent, model.model_name, kind="model")


class _InCase:
    """Stands in for the agent's ``_override_root_capability`` (the context variable behind
    ``agent.override(root_capability=...)``, read each time the agent resolves its root
    capability): outside a case it answers what the variable holds, so the agent runs as it
    would bare — not even a wrapper for Pydantic AI to hand every hook through; inside a case,
    the root capability in force (the agent's own, or the one an override set) wrapped by the
    recording one."""

    __slots__ = ("agent", "recording", "var")

    def __init__(self, var: ContextVar[Any], agent: Any) -> None:
        self.var = var
        self.agent = agent
        self.recording: tuple[Any, Any] | None = None  # (root capability, Some(it wrapped))

    def get(self, *default: Any) -> Any:
        value = self.var.get(*default)
        if _CURRENT.get() is None:
            return value
        base = self.agent._root_capability if value is None else value.value
        recording = self.recording
        if recording is None or recording[0] is not base:
            recording = self.recording = (base, Some(_Recording(base, agent=self.agent)))
        return recording[1]

    def set(self, value: Any) -> Any:
        return self.var.set(value)

    def reset(self, token: Any) -> None:
        self.var.reset(token)


def _instrumented(agent: Any) -> bool:
    return isinstance(agent.__dict__.get("_override_root_capability"), _InCase)


def instrument(agent: Any) -> Any:
    """Route ``agent``'s tool calls and model requests through Oloproof's recorder (see the
    module); returns the same agent. Idempotent: an agent instrumented twice records each call
    once.

    Args:
        agent: a ``pydantic_ai.Agent``.

    Returns:
        ``agent`` itself.

    Raises:
        TypeError: ``agent`` is not a ``pydantic_ai.Agent`` (a ``WrapperAgent`` such as a
            durable-execution agent: instrument the agent it wraps).
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"instrument() takes a pydantic_ai.Agent, got {type(agent).__name__}"
                        + (": instrument the agent it wraps (its .wrapped)" if hasattr(agent, "wrapped") else ""))
    if _instrumented(agent):
        return agent
    # every run starts from the root capability in force: inside a case, with ours added
    setattr(agent, "_override_root_capability", _InCase(agent._override_root_capability, agent))  # noqa: B010
    if not isinstance(agent.__dict__.get("__oloproof_tools__"), _LiveDeclarations):
        setattr(agent, "__oloproof_tools__", _LiveDeclarations(agent))  # noqa: B010 - a dunder name
    _declare_tools(agent)
    return agent
