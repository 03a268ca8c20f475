"""LangGraph (SPEC §18.4): ``instrument(graph)`` routes a compiled graph's tool calls and chat
model calls through Oloproof's recorder — recorded inside a case, answered from the tape in
control and fault replays and in prefix runs, faultable with every fault kind — with agent
names and handoffs taken from the graph. Needs ``pip install 'oloproof[langgraph]'``.

What is routed, and how (docs/frameworks/langgraph.md says it at more length):

* **Tools**: every ``BaseTool`` of the graph's ``ToolNode`` s (``create_react_agent`` 's too),
  in subgraphs and in the closures of its nodes, has its ``_run`` / ``_arun`` routed: the
  call's arguments as the model gave them (the tool's ``tool_call_schema`` fields: never the
  ``tool_call_id``, the injected state, store, runtime or config), the tool's own return
  value as its result. LangChain then wraps whatever comes back — the tool's value in its
  recorded form (its JSON form, keys in their order: what the tape gives back), the tape's, a fault's — in the
  ``ToolMessage`` the model sees, as it always does.
* **Handoffs**: a tool that returns ``Command`` (annotated ``-> Command``, or carrying
  langgraph-supervisor's ``__handoff_destination`` metadata, as ``transfer_to_billing`` does)
  is no tool call: it runs as is, and when its ``Command`` sends control to a node of the
  instrumented graph, control passes to that agent — one ``handoff`` step.
* **Model calls**: chat models hide in node closures (``create_react_agent`` keeps its model
  in one), are made per call (dynamic models) or inside the user's own nodes, so no walk of
  the graph finds them all. Instead, one class-level hook on
  ``BaseChatModel._generate_with_cache`` (the step of LangChain's generate path that calls
  the provider) routes every chat model call made *while an instrumented graph runs inside a
  case*; anywhere else it costs one context-variable read. Its request is recorded as JSON
  (the messages with their random ids dropped, the names of the tools offered, the other
  call options), its ``ChatResult`` through :data:`CODEC`, rebuilt from the tape in replays.
* **Agent names** come from LangGraph's own run metadata: a call inside a subgraph node of
  the instrumented graph belongs to that node (``langgraph_checkpoint_ns`` 's first segment:
  ``billing`` in ``billing:…|agent:…``); a model call in a top-level node to that node
  (``langgraph_node``), a tool call in a top-level ``ToolNode`` to the agent in control; a
  graph made by ``create_react_agent(name=…)`` and instrumented itself is one agent: its name.
* **The final step and status** of the outermost instrumented invocation in the case: the
  text of the output's last AI message (``success``); no answer, ``failure``; an exception,
  ``failure`` and no final step; an interrupted graph, ``unknown``.
* Inside a case the run gets ``max_concurrency=1``: the tasks of one step (parallel tool
  calls, parallel nodes) run one at a time, in LangGraph's order, not in the order threads
  happen to finish.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import operator
import typing
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import msgspec
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, messages_from_dict
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableBinding, RunnableSequence
from langchain_core.runnables.config import ensure_config, var_child_runnable_config
from langchain_core.tools import BaseTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt import ToolNode
from langgraph.pregel import Pregel
from langgraph.types import Command, GraphOutput, Send
from pydantic import BaseModel, PlainSerializer, WrapSerializer
from pydantic_core import to_jsonable_python

from oloproof.integrations import aroute, declare, route, switch_to
from oloproof.recorder.prefix import FrozenToolError
from oloproof.records import encode_recorded
from oloproof.replay.tape import ReplayedToolError
from oloproof.system import _CURRENT, ToolCodec

__all__ = ["CODEC", "instrument", "request_of"]

#: what marks an object this module instrumented (a graph, a tool, a tool node, the hook)
_MARK = "__oloproof_langgraph__"
#: langgraph-supervisor's metadata key on a handoff tool
_HANDOFF_KEY = "__handoff_destination"
#: ids LangChain generates for a response (``lc_run--<run uuid>-0``, ``run-<uuid>``): random
_GENERATED_IDS = ("lc_run-", "run-")


class _Graph:
    """What :func:`instrument` learnt of a graph once: its agents' names."""

    __slots__ = ("nodes", "react", "tool_nodes")

    def __init__(self, graph: Any) -> None:
        nodes = {name: node.bound for name, node in graph.nodes.items() if not name.startswith("__")}
        #: the graph's own nodes: a Command sending control to one passes it to that agent
        self.nodes = frozenset(nodes)
        self.tool_nodes = frozenset(n for n, bound in nodes.items() if isinstance(bound, ToolNode))
        #: a graph create_react_agent made is one agent, whatever its nodes are called
        self.react: str | None = None
        if any(_is_react_call(bound) for bound in nodes.values()):
            name = getattr(graph, "name", None)
            self.react = name if isinstance(name, str) and name and name != "LangGraph" else "agent"


class _Run:
    """The outermost instrumented graph run in progress in a case (what :data:`_RUN` holds):
    its graph, how deep in LangGraph's namespaces it runs, the agent in control."""

    __slots__ = ("graph", "depth", "last", "seen", "options")

    def __init__(self, graph: _Graph, depth: int) -> None:
        self.graph = graph
        self.depth = depth
        self.last: str | None = None
        #: the messages already written for a request in this run (each request repeats the
        #: conversation so far): id -> (the message, kept alive so its id is not reused; its
        #: content when written, to see a message changed in place; what was written)
        self.seen: dict[int, tuple[Any, Any, bytes]] = {}
        #: the last request's options (stop, their names, values — kept alive — and JSON)
        self.options: tuple[Any, tuple[str, ...], tuple[Any, ...], bytes] | None = None

    def agent_of(self, metadata: Any, *, model: bool) -> str | None:
        """The agent a call belongs to, from LangGraph's metadata of the node it runs in."""
        ns = metadata.get("langgraph_checkpoint_ns") if isinstance(metadata, dict) else None
        if not isinstance(ns, str) or not ns:
            return self.last
        rel = ns.split("|")[self.depth:]
        if not rel:
            return self.last
        node = rel[0].partition(":")[0]
        g = self.graph
        if len(rel) > 1:  # inside a subgraph (or a graph a node runs): that node is the agent
            agent = node
        elif g.react is not None:
            agent = g.react
        elif not model and node in g.tool_nodes:  # a shared ToolNode runs the agent in control's tools
            agent = self.last or node
        else:
            agent = node
        self.last = agent
        return agent


#: the instrumented graph run in progress (None: none, or outside a case)
_RUN: ContextVar[_Run | None] = ContextVar("oloproof_langgraph_run", default=None)
#: the tool whose routed call is in progress: its ``_arun`` running its ``_run`` is one call
_IN_TOOL: ContextVar[Any] = ContextVar("oloproof_langgraph_tool", default=None)
#: a routed model call is in progress (a model wrapping another is one call)
_IN_MODEL: ContextVar[bool] = ContextVar("oloproof_langgraph_model", default=False)


def instrument(graph: Any, *, tools: Any = ()) -> Any:
    """Route ``graph`` 's tool calls and chat model calls through Oloproof's recorder (see
    the module docstring): returns ``graph`` itself. Idempotent: a graph, a tool or a subgraph
    instrumented twice (or on its own and as part of another) records each call once.

    Args:
        graph: a compiled graph (``StateGraph(...).compile()``, ``create_react_agent(...)``:
            a ``Pregel``).
        tools: tools the graph's nodes call by hand (not through a ``ToolNode``), to route
            too.

    Returns:
        ``graph``, instrumented.

    Raises:
        TypeError: ``graph`` is not a compiled LangGraph graph.
    """
    if not isinstance(graph, Pregel):
        hint = " (call .compile() on it first)" if hasattr(graph, "compile") else ""
        raise TypeError(f"oloproof.integrations.langgraph.instrument() takes a compiled LangGraph graph "
                        f"(a Pregel, e.g. StateGraph(...).compile() or create_react_agent(...)), "
                        f"got {type(graph).__name__}{hint}")
    _install_model_hook()
    found_tools, models, graphs = _parts(graph, tools)
    for t in found_tools:
        if _route_tool(t):
            continue  # a handoff: not a tool call
        declare(graph, t.name, schema=_schema(t), doc=t.description or None)
    for m in models:
        declare(graph, _model_name(m), kind="model")
    for g in graphs:  # every graph reached: its own runs are the outermost when invoked alone
        _wrap_graph(g)
    return graph


# ---- what a graph holds ----------------------------------------------------------------------

def _parts(graph: Any, extra: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """The tools, chat models and graphs reachable from ``graph`` (its nodes,
    subgraphs, the closures of its node functions), each once, in the order found."""
    tools: list[Any] = []
    models: list[Any] = []
    graphs: list[Any] = []
    seen: set[int] = set()

    def walk(obj: Any, depth: int) -> None:
        if depth > 8 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, Pregel):
            graphs.append(obj)
            for node in obj.nodes.values():
                walk(node.bound, 1)  # a graph starts afresh: agents nest graphs in closures
        elif isinstance(obj, ToolNode):
            for t in obj.tools_by_name.values():
                walk(t, depth + 1)
        elif isinstance(obj, BaseTool):
            tools.append(obj)
        elif isinstance(obj, BaseChatModel):
            models.append(obj)
        elif isinstance(obj, RunnableBinding):
            walk(obj.bound, depth + 1)
        elif isinstance(obj, RunnableSequence) or type(obj).__name__ == "RunnableSeq":
            for step in getattr(obj, "steps", ()):
                walk(step, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item, depth + 1)
        elif callable(getattr(obj, "func", None)) or callable(getattr(obj, "afunc", None)):  # a node function
            for fn in (getattr(obj, "func", None), getattr(obj, "afunc", None)):
                walk(fn, depth + 1)
        elif inspect.isfunction(obj) or inspect.ismethod(obj):
            fn = obj.__func__ if inspect.ismethod(obj) else obj
            for cell in fn.__closure__ or ():
                try:
                    walk(cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell
                    continue

    walk(graph, 0)
    for t in extra or ():
        walk(t, 0)
    return tools, models, graphs


def _is_react_call(bound: Any) -> bool:
    func = getattr(bound, "func", None)
    return getattr(func, "__qualname__", "").startswith("create_react_agent.")


def _schema(tool: Any) -> Any:
    """The JSON schema of the arguments the model is shown (no injected ones)."""
    try:
        return convert_to_openai_tool(tool)["function"].get("parameters")
    except Exception:  # noqa: BLE001 - a schema LangChain cannot convert: the tool is still routed
        return None


def _model_name(model: Any) -> str:
    """What a model's decisions are named: its model name, else its LangChain type."""
    for attr in ("model_name", "model", "model_id"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    try:
        return str(model._llm_type)
    except Exception:  # noqa: BLE001 - a model whose type raises is still a model
        return type(model).__name__


# ---- tools -----------------------------------------------------------------------------------

def _route_tool(tool: Any) -> bool:
    """Route ``tool`` 's calls (once); True when it is a handoff tool (not a tool call)."""
    handoff = _is_handoff(tool)
    if tool.__dict__.get(_MARK):
        return handoff
    name = tool.name
    fields = _argument_names(tool)
    run_, arun_ = tool._run, tool._arun

    @functools.wraps(run_)
    def _run(*args: Any, **kwargs: Any) -> Any:
        run = _RUN.get()
        if run is None or _CURRENT.get() is None or _IN_TOOL.get() is tool:
            return run_(*args, **kwargs)
        if handoff:
            out = run_(*args, **kwargs)
            _handed_off(run, out)
            return out
        agent = run.agent_of(_metadata(kwargs), model=False)
        token = _IN_TOOL.set(tool)
        try:
            return _as_recorded(route(name, run_, args, kwargs, arguments=_arguments(fields, args, kwargs),
                                      agent=agent))
        except _TAPE_ERRORS as e:
            raise _rebuilt(e) from None
        finally:
            _IN_TOOL.reset(token)

    @functools.wraps(arun_)
    async def _arun(*args: Any, **kwargs: Any) -> Any:
        run = _RUN.get()
        if run is None or _CURRENT.get() is None or _IN_TOOL.get() is tool:
            return await arun_(*args, **kwargs)
        if handoff:
            out = await arun_(*args, **kwargs)
            _handed_off(run, out)
            return out
        agent = run.agent_of(_metadata(kwargs), model=False)
        token = _IN_TOOL.set(tool)
        try:
            return _as_recorded(await aroute(name, arun_, args, kwargs, arguments=_arguments(fields, args, kwargs),
                                             agent=agent))
        except _TAPE_ERRORS as e:
            raise _rebuilt(e) from None
        finally:
            _IN_TOOL.reset(token)

    # a pydantic model: set on the instance past its validation (these are methods, not fields)
    object.__setattr__(tool, "_run", _run)
    object.__setattr__(tool, "_arun", _arun)
    object.__setattr__(tool, _MARK, True)
    return handoff


def _as_recorded(value: Any) -> Any:
    """A tool's value as it is recorded, and as a replay's tape gives it back: its JSON form
    (a pydantic model's fields, a dataclass's), keys in their order. LangChain writes it into
    the ``ToolMessage`` the model reads (``json.dumps`` of a dict keeps its key order), so the
    tool hands LangChain this form in the recording too — or the model's next request would
    differ between the recording and its control replay. A value that cannot be recorded is
    left as it is (the recorder reports it)."""
    if value is None or isinstance(value, (str, int, float, bool)) and type(value) in (str, int, float, bool):
        return value

    try:
        return msgspec.json.decode(encode_recorded(value))
    except Exception:  # noqa: BLE001 - unfit for the log: the recorder names it, the agent gets it as is
        return value


def _is_handoff(tool: Any) -> bool:
    """A tool that hands control over: langgraph-supervisor's metadata, or ``-> Command``."""
    if _HANDOFF_KEY in (getattr(tool, "metadata", None) or {}):
        return True

    for fn in (getattr(tool, "func", None), getattr(tool, "coroutine", None)):
        if fn is None:
            continue
        try:
            returns = typing.get_type_hints(fn).get("return")
        except Exception:  # noqa: BLE001 - an annotation that does not resolve: read its text
            returns = inspect.signature(fn).return_annotation
            if isinstance(returns, str) and returns.split("[")[0].strip().rpartition(".")[2] == "Command":
                return True
        if returns is Command or typing.get_origin(returns) is Command:
            return True
    return False


def _handed_off(run: _Run, out: Any) -> None:
    """A handoff tool returned ``out``: a ``Command`` sending control to a node of the
    instrumented graph passes control to that agent."""
    for item in out if isinstance(out, list) else (out,):
        if not isinstance(item, Command):
            continue
        gotos = item.goto if isinstance(item.goto, (list, tuple)) else (item.goto,)
        for goto in gotos:
            target = goto.node if isinstance(goto, Send) else goto
            if isinstance(target, str) and target in run.graph.nodes:
                run.last = target
                switch_to(target)
                return


def _argument_names(tool: Any) -> tuple[str, ...] | None:
    """The arguments the model gives the tool (its ``tool_call_schema`` 's fields); None
    when the tool has no schema LangChain can give."""
    try:
        schema = tool.tool_call_schema
        if isinstance(schema, dict):
            return tuple((schema.get("properties") or {}).keys())

        if isinstance(schema, type) and issubclass(schema, BaseModel):
            return tuple(schema.model_fields)
        fields = getattr(schema, "__fields__", None)  # a pydantic.v1 model
        return tuple(fields) if isinstance(fields, dict) else None
    except Exception:  # noqa: BLE001 - no schema: every argument but LangChain's own
        return None


def _arguments(fields: tuple[str, ...] | None, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as recorded: those the model gave, JSON; a single string input
    under the tool's one argument's name."""
    if fields is not None:
        out = {k: kwargs[k] for k in fields if k in kwargs}
    else:
        out = {k: v for k, v in kwargs.items() if k not in ("run_manager", "callbacks", "config")}
    for i, value in enumerate(args):
        out[fields[i] if fields is not None and i < len(fields) else f"*{i}"] = value
    return _jsonable(out)


def _metadata(kwargs: dict[str, Any]) -> Any:
    """LangGraph's metadata of the node a call runs in: the config LangChain set for the run
    in progress (the tool's own ``run_manager`` when there is none)."""
    config = var_child_runnable_config.get()
    if config is not None and config.get("metadata"):
        return config["metadata"]
    manager = kwargs.get("run_manager")
    return getattr(manager, "metadata", None)


#: what the tape raises for a call that raised when it was recorded (a replay, a prefix run)
_TAPE_ERRORS = (ReplayedToolError, FrozenToolError)


def _rebuilt(error: BaseException) -> BaseException:
    """The exception a tool raised when it was recorded, as the tape gives it back
    (``"ValueError: not delivered"``): of a built-in type (or LangChain's ``ToolException``)
    when it was one, else of a class of the same name — so that the ``ToolMessage`` LangGraph
    writes of it (``Error: ValueError('not delivered')``) is the recorded one, and so is the
    model's next request."""
    type_name, _, message = str(error).partition(": ")
    cls = getattr(builtins, type_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = ToolException if type_name == "ToolException" else \
            type(type_name, (Exception,), {"__module__": __name__})
    try:
        return cls(message)
    except Exception:  # noqa: BLE001 - a built-in that takes other arguments (UnicodeError's)
        return type(type_name, (Exception,), {"__module__": __name__})(message)


# ---- models ----------------------------------------------------------------------------------

def _install_model_hook() -> None:
    """Route chat model calls made while an instrumented graph runs in a case (once)."""
    generate = BaseChatModel.__dict__["_generate_with_cache"]
    if getattr(generate, _MARK, False):
        return
    agenerate = BaseChatModel.__dict__["_agenerate_with_cache"]

    @functools.wraps(generate)
    def _generate_with_cache(self: Any, messages: list[Any], stop: list[str] | None = None,
                             run_manager: Any = None, **kwargs: Any) -> Any:
        run = _RUN.get()
        if run is None or _IN_MODEL.get() or (rec := _CURRENT.get()) is None:
            return generate(self, messages, stop, run_manager, **kwargs)
        name = _model_name(self)
        config = var_child_runnable_config.get()
        agent = run.agent_of(config["metadata"] if config is not None and config.get("metadata")
                             else getattr(run_manager, "metadata", None), model=True)
        token = _IN_MODEL.set(True)
        try:
            result = route(name, generate, (self, messages, stop, run_manager), kwargs,
                           arguments=_request(run, messages, stop, kwargs), kind="model", codec=CODEC,
                           agent=agent)
        finally:
            _IN_MODEL.reset(token)
        _usage(rec, result, name)
        return result

    @functools.wraps(agenerate)
    async def _agenerate_with_cache(self: Any, messages: list[Any], stop: list[str] | None = None,
                                    run_manager: Any = None, **kwargs: Any) -> Any:
        run = _RUN.get()
        if run is None or _IN_MODEL.get() or (rec := _CURRENT.get()) is None:
            return await agenerate(self, messages, stop, run_manager, **kwargs)
        name = _model_name(self)
        agent = run.agent_of(_metadata({"run_manager": run_manager}), model=True)
        token = _IN_MODEL.set(True)
        try:
            result = await aroute(name, agenerate, (self, messages, stop, run_manager), kwargs,
                                  arguments=_request(run, messages, stop, kwargs), kind="model",
                                  codec=CODEC, agent=agent)
        finally:
            _IN_MODEL.reset(token)
        _usage(rec, result, name)
        return result

    setattr(_generate_with_cache, _MARK, True)
    setattr(_agenerate_with_cache, _MARK, True)
    BaseChatModel._generate_with_cache = _generate_with_cache  # type: ignore[method-assign]
    BaseChatModel._agenerate_with_cache = _agenerate_with_cache  # type: ignore[method-assign]


def request_of(messages: list[Any], stop: list[str] | None = None, options: dict[str, Any] | None = None,
               seen: dict[int, tuple[Any, Any, bytes]] | None = None) -> msgspec.Raw:
    """A chat model call's request as recorded (and matched against the tape), as JSON bytes:
    the messages without their ids (random uuids LangGraph and LangChain give them), the names
    of the tools offered (their schemas are the tools' declarations), ``stop`` and any other
    option. ``seen``: each message's JSON written already in this run, reused — a run's later
    requests repeat its earlier messages, and are the bytes joined, not the messages written
    again.
    """
    if seen is None:
        written = b",".join([_message_bytes(m, keep_id=False) for m in messages])
    else:
        written = _written(messages, seen)
    return msgspec.Raw(b'{"messages":[' + written + b"]" + _options(stop, options))


def _written(messages: Any, seen: dict[int, tuple[Any, Any, bytes]]) -> bytes:
    """The messages' JSON, joined: each one's reused from ``seen`` when it is the same message
    with the same content, written (and kept there) otherwise."""
    written = []
    get = seen.get
    for m in messages:
        known = get(id(m))
        content = getattr(m, "content", None)
        if known is None or known[0] is not m or known[1] is not content:
            known = seen[id(m)] = (m, content, _message_bytes(m, keep_id=False))
        written.append(known[2])
    return b",".join(written)


def _options(stop: list[str] | None, options: dict[str, Any] | None) -> bytes:
    """The request's members after its messages (``,"stop":…,"tools":[…]}``), or ``}``."""
    out: dict[str, Any] = {}
    if stop is not None:
        out["stop"] = list(stop)
    for key, value in sorted((options or {}).items()):
        if key == "tools" and isinstance(value, (list, tuple)):
            out["tools"] = [_tool_label(t) for t in value]
        else:
            out[key] = _jsonable(value)
    return b"," + _encode_json(out)[1:] if out else b"}"


def _request(run: _Run, messages: list[Any], stop: list[str] | None, options: dict[str, Any]) -> msgspec.Raw:
    """:func:`request_of` in a run: the messages written before reused (``run.seen``), and the
    options' JSON too when they are the last request's — the same objects (what the model was
    bound with: its tools), checked as such in a C loop."""
    written = _written(messages, run.seen)
    keys, values = tuple(options), tuple(options.values())
    last = run.options
    if last is not None and last[0] is stop and last[1] == keys and all(map(operator.is_, values, last[2])):
        rest = last[3]
    else:
        rest = _options(stop, options)
        run.options = (stop, keys, values, rest)
    return msgspec.Raw(b'{"messages":[' + written + b"]" + rest)


def _tool_label(tool: Any) -> Any:
    if isinstance(tool, dict):
        function = tool.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
        if isinstance(tool.get("name"), str):
            return tool["name"]
        return _jsonable(tool)
    name = getattr(tool, "name", None)
    return name if isinstance(name, str) else _jsonable(tool)


def _message_json(message: Any, *, keep_id: bool) -> Any:
    """A LangChain message as ``message_to_dict`` writes it (``{"type", "data"}``), without
    its empty fields and (``keep_id`` False, or an id LangChain generated) its id."""
    if not isinstance(message, BaseMessage):
        return _jsonable(message)
    try:
        data = message.model_dump(mode="json")
    except Exception:  # noqa: BLE001 - a field pydantic cannot write as JSON (an artifact): ours does
        data = _jsonable(message.model_dump())
    data.pop("type", None)
    # the message's own empty fields only: a None inside (a tool call's id) is data
    for key in [k for k, v in data.items() if (v is None or v == {} or v == []) and k != "content"]:
        del data[key]
    mid = data.get("id")
    if mid is not None and (not keep_id or isinstance(mid, str) and mid.startswith(_GENERATED_IDS)):
        del data["id"]
    return {"type": message.type, "data": data}


#: the types of a message's fields that pydantic writes as they are (JSON already)
_PLAIN = frozenset((str, list, dict, int, float, bool, type(None)))
#: the types of the empty fields a message is written without
_EMPTIED = frozenset((dict, list, type(None)))
#: a message class's fields in the order pydantic writes them; None: a class that writes
#: itself otherwise (computed fields, its own serializers)
_SCALAR_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _scalar_fields(cls: Any) -> tuple[str, ...] | None:
    decorators = cls.__pydantic_decorators__
    if cls.model_computed_fields or decorators.field_serializers or decorators.model_serializers:
        return None
    for field in cls.model_fields.values():  # a field written under another name, or not at all, or its own way
        if field.alias or field.serialization_alias or field.exclude \
                or any(isinstance(m, (PlainSerializer, WrapSerializer)) for m in field.metadata):
            return None
    return tuple(cls.model_fields)


#: a field a message does not have
_UNSET = object()
#: ``{"type":"ai","data":`` of each message type
_HEADS: dict[str, bytes] = {}


def _message_bytes(message: Any, *, keep_id: bool) -> bytes:
    """:func:`_message_json` 's JSON bytes, the same bytes, made faster for LangChain's own
    messages (no field written another way, no extra field): one whose fields are text (a
    tool's result, a human turn) written from its fields here; one whose fields are plain JSON
    values written by pydantic straight to bytes; anything else (an artifact, a 1e+16 pydantic
    writes otherwise) dumped to data, then written."""
    if isinstance(message, BaseMessage) and not message.__pydantic_extra__:
        names = _SCALAR_FIELDS.get(type(message), ())
        if names == ():
            names = _SCALAR_FIELDS[type(message)] = _scalar_fields(type(message))
        if names is not None:
            fields = message.__dict__
            data: dict[str, Any] = {}
            for key in names:
                value = fields.get(key, _UNSET)
                kind = type(value)
                if kind is str or kind is int or kind is float or kind is bool:
                    data[key] = value
                elif value is None or (kind is dict or kind is list) and not value:  # empty: left out
                    if key == "content":
                        data[key] = value
                else:
                    break  # a structure (pydantic writes a TypedDict's keys in their declared order), or unset
            else:
                data.pop("type", None)
                mid = data.get("id")
                if mid is not None and (not keep_id or isinstance(mid, str) and mid.startswith(_GENERATED_IDS)):
                    del data["id"]
                return _encode_json({"type": message.type, "data": data})
            if _PLAIN.issuperset(map(type, fields.values())):
                drop = {k for k, v in fields.items() if not v and type(v) in _EMPTIED}  # None, {}, []
                drop.discard("content")
                drop.add("type")
                mid = fields.get("id")
                if mid is not None and (not keep_id or isinstance(mid, str) and mid.startswith(_GENERATED_IDS)):
                    drop.add("id")
                try:
                    body = message.__pydantic_serializer__.to_json(message, exclude=drop)
                except Exception:  # noqa: BLE001 - pydantic cannot write it: the general way says why, or copes
                    body = b"e+"
                if b"e+" not in body:  # pydantic writes 1e16 as 1e+16: the general way keeps the bytes
                    head = _HEADS.get(message.type)
                    if head is None:
                        head = _HEADS[message.type] = b'{"type":' + _encode_json(message.type) + b',"data":'
                    return head + body + b"}"
    return _encode_json(_message_json(message, keep_id=keep_id))


def _encode(value: Any) -> Any:
    """A ``ChatResult`` as recorded — its JSON bytes, made once (the generations' messages,
    their generation info, the provider's output); anything else as JSON."""
    if not isinstance(value, ChatResult):
        return _jsonable(value)
    parts = []
    for g in value.generations:
        written = _message_bytes(g.message, keep_id=True)
        if g.generation_info:
            parts.append(b'{"message":' + written + b',"generation_info":'
                         + _encode_json(_jsonable(g.generation_info)) + b"}")
        else:
            parts.append(b'{"message":' + written + b"}")
    out = b'{"generations":[' + b",".join(parts) + b"]"
    if value.llm_output:
        out += b',"llm_output":' + _encode_json(_jsonable(value.llm_output))
    return msgspec.Raw(out + b"}")


def _decode(data: Any) -> Any:
    """The ``ChatResult`` a recorded response was (LangChain's own message classes, chosen by
    their ``type`` tag: nothing else is built from the tape)."""
    if isinstance(data, msgspec.Raw):
        data = msgspec.json.decode(data)
    generations = [ChatGeneration(message=messages_from_dict([g["message"]])[0],
                                  generation_info=g.get("generation_info"))
                   for g in data["generations"]]
    return ChatResult(generations=generations, llm_output=data.get("llm_output"))


#: how a chat model's response goes on the tape and comes back (``ChatResult`` ⇄ JSON)
CODEC = ToolCodec(_encode, _decode)


def _usage(rec: Any, result: Any, model: str) -> None:
    """Report the response's token usage to the case ``rec`` (``usage_metadata``)."""
    for g in getattr(result, "generations", ()):
        usage = getattr(g.message, "usage_metadata", None)
        if not isinstance(usage, dict):
            continue
        sent, received = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
        if type(sent) is int and type(received) is int and sent >= 0 and received >= 0:
            rec.usage(input_tokens=sent, output_tokens=received, model=model)


_encode_json = msgspec.json.Encoder().encode


def _jsonable(value: Any) -> Any:
    """``value`` as JSON data, deterministically: pydantic models and dataclasses as their JSON
    form; what has none as its type's name (never a repr with an address in it)."""
    return to_jsonable_python(value, fallback=lambda v: f"<{type(v).__name__}>")


# ---- the graph's runs ------------------------------------------------------------------------

def _wrap_graph(graph: Any) -> None:
    """The graph's runs set :data:`_RUN` in a case (the outermost one records the final
    step and the status); outside a case, and nested in another, they run as they are."""
    if graph.__dict__.get(_MARK):
        return
    info = _Graph(graph)
    invoke, ainvoke, stream, astream = graph.invoke, graph.ainvoke, graph.stream, graph.astream

    def start(config: Any) -> _Run | None:
        if _CURRENT.get() is None or _RUN.get() is not None:
            return None
        return _Run(info, _depth(config))

    @functools.wraps(invoke)
    def _invoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
        run = start(config)
        if run is None:
            return invoke(input, config, **kwargs)
        token = _RUN.set(run)
        try:
            out = invoke(input, _one_at_a_time(config), **kwargs)
        except Exception:
            _finish(None, raised=True)
            raise
        finally:
            _RUN.reset(token)
        _finish(out)
        return out

    @functools.wraps(ainvoke)
    async def _ainvoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
        run = start(config)
        if run is None:
            return await ainvoke(input, config, **kwargs)
        token = _RUN.set(run)
        try:
            out = await ainvoke(input, _one_at_a_time(config), **kwargs)
        except Exception:
            _finish(None, raised=True)
            raise
        finally:
            _RUN.reset(token)
        _finish(out)
        return out

    @functools.wraps(stream)
    def _stream(input: Any, config: Any = None, **kwargs: Any) -> Iterator[Any]:
        run = start(config)
        if run is None:
            yield from stream(input, config, **kwargs)
            return
        chunks = stream(input, _one_at_a_time(config), **kwargs)
        last = None
        while True:
            token = _RUN.set(run)
            try:
                last = chunk = next(chunks)
            except StopIteration:
                break
            except Exception:
                _finish(None, raised=True)
                raise
            finally:
                _RUN.reset(token)
            yield chunk
        _finish(last)

    @functools.wraps(astream)
    async def _astream(input: Any, config: Any = None, **kwargs: Any) -> Any:
        run = start(config)
        if run is None:
            async for chunk in astream(input, config, **kwargs):
                yield chunk
            return
        chunks = astream(input, _one_at_a_time(config), **kwargs)
        last = None
        try:
            while True:
                token = _RUN.set(run)
                try:
                    last = chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception:
                    _finish(None, raised=True)
                    raise
                finally:
                    _RUN.reset(token)
                yield chunk
        finally:
            await chunks.aclose()
        _finish(last)

    graph.invoke, graph.ainvoke, graph.stream, graph.astream = _invoke, _ainvoke, _stream, _astream
    graph.__dict__[_MARK] = True


def _one_at_a_time(config: Any) -> Any:
    """The run's config with ``max_concurrency`` 1: LangGraph runs the tasks of one step (a
    message's tool calls, parallel nodes) in threads (async: as tasks), so the order of
    their calls — the steps, and what a replay's tape answers — would depend on timing. One
    at a time, in the order LangGraph schedules them, it does not."""
    if isinstance(config, dict) and config.get("max_concurrency") == 1:
        return config
    return {**(config or {}), "max_concurrency": 1}


def _depth(config: Any) -> int:
    """How many of LangGraph's namespaces the graph runs under (a graph run inside another's
    node: its calls' namespaces start with the outer ones)."""
    ns = (ensure_config(config).get("configurable") or {}).get("checkpoint_ns")
    return len(ns.split("|")) if isinstance(ns, str) and ns else 0


def _finish(out: Any, *, raised: bool = False) -> None:
    """The outermost run ended: its answer is the final step, and the status."""
    rec = _CURRENT.get()
    if rec is None:
        return
    if raised:
        rec.finish("failure")
        return
    state, interrupted = _state_of(out)
    if interrupted:
        rec.finish("unknown")
        return
    answer = _answer(state)
    if answer is None:
        rec.finish("failure" if _messages(state) is not None else "unknown")
        return
    rec.final(answer)
    rec.finish("success")


def _state_of(out: Any) -> tuple[Any, bool]:
    """The graph's output state, and whether the graph stopped at an interrupt."""
    if isinstance(out, GraphOutput):
        return out.value, bool(out.interrupts)
    if isinstance(out, tuple) and len(out) in (2, 3) and isinstance(out[0], (str, tuple)):
        return _state_of(out[-1])  # a stream's (mode, chunk) / (namespace, mode, chunk)
    if isinstance(out, dict):
        if out.get("type") in ("values", "updates") and "data" in out:  # a v2 stream part
            return _state_of(out["data"])
        return out, "__interrupt__" in out
    return out, False


def _messages(state: Any) -> list[Any] | None:
    messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    if messages is None and isinstance(state, dict) and len(state) == 1:  # an update of one node
        return _messages(next(iter(state.values())))
    return messages if isinstance(messages, list) else None


def _answer(state: Any) -> str | None:
    """The text of the state's last message, when it is an AI message that calls no tool."""
    messages = _messages(state)
    if not messages:
        return None
    last = messages[-1]
    if not isinstance(last, AIMessage) or last.tool_calls:
        return None
    return str(last.text)  # a TextAccessor: a str subclass, recorded as the plain text
