"""Tool declarations: the decorator, the registry, argument validation and results (S1).

Owns: ``ToolSpec`` (what a tool author declares: task support, poll interval, ttl,
output schema, idempotency), the argument model derived from the function signature,
the conversion of a return value into a ``CallToolResult`` body, and a plain ``def``
tool made into a coroutine function that runs it on a worker thread. Must not: decide
when tools run, touch the store, or know either wire version's task shapes.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_type_hints

import pydantic

from longcall.core.keys import canonical_json
from longcall.server.errors import InvalidParams
from longcall.server.inputs import check_request
from longcall.server.model import Principal

TaskSupport = Literal["forbidden", "optional", "required"]
TASK_SUPPORT_VALUES: frozenset[str] = frozenset({"forbidden", "optional", "required"})

DEFAULT_POLL_INTERVAL_MS = 1_000
DEFAULT_TTL_MS = 24 * 3600 * 1000


class TaskContext(Protocol):
    """What a running tool may do besides computing its result (S6, S7)."""

    @property
    def task_id(self) -> str | None:
        """The task id, or ``None`` when the call runs synchronously."""
        ...

    @property
    def principal(self) -> Principal:
        """Who created the call (S5)."""
        ...

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Report progress; the message becomes the task's ``statusMessage``."""
        ...

    @property
    def client_capabilities(self) -> Mapping[str, Any] | None:
        """What the calling client declared it can answer (``None``: not known)."""
        ...

    @property
    def rounds(self) -> int:
        """Input rounds (SEP-2322) this call went through before this run: 0 at first."""
        ...

    async def request_inputs(
        self, requests: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """Ask for several inputs at once (key → ``{method, params}``, see
        ``longcall.server.inputs``) and get every answer, by key.

        In a task the requests are answered through the task (``tasks/update`` or the
        2025-11-25 side channel); in a synchronous 2026-07-28 call the round ends and the
        client retries with the answers (the tool runs again from the top).
        """
        ...

    async def elicit(
        self, message: str, requested_schema: dict[str, Any], *, key: str | None = None
    ) -> dict[str, Any]:
        """Ask the client for form input and wait for the answer (an ``ElicitResult`` body)."""
        ...


AsyncToolFunction = Callable[..., Awaitable[Any]]
ToolFunction = AsyncToolFunction | Callable[..., Any]
"""An ``async def`` tool, or a plain ``def`` one (run on a worker thread, off the loop)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """One served tool: the function and everything its author declared (S1)."""

    name: str
    description: str
    function: AsyncToolFunction
    task_support: TaskSupport
    poll_interval_ms: int
    ttl_ms: int | None
    idempotent: bool
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    arguments_model: type[pydantic.BaseModel]
    context_parameter: str | None
    ask_first: dict[str, dict[str, Any]] | None = None
    """Questions (key → input request) settled by SEP-2322 rounds before a task is created;
    the body's first inputs (in this order) then get the stored answers."""

    def validate_arguments(self, arguments: Any) -> dict[str, Any]:
        """Validated keyword arguments for the function; -32602 with details otherwise."""
        if not isinstance(arguments, dict):
            raise InvalidParams(f"arguments of tool {self.name!r} must be an object")
        try:
            model = self.arguments_model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            details = [
                {"loc": list(err["loc"]), "msg": err["msg"], "type": err["type"]}
                for err in exc.errors(include_url=False, include_input=False)
            ]
            raise InvalidParams(f"invalid arguments for tool {self.name!r}", details) from exc
        return {name: getattr(model, name) for name in type(model).model_fields}

    def tool_definition(self, *, with_execution: bool) -> dict[str, Any]:
        """The ``Tool`` object for ``tools/list``; ``execution`` exists only in 2025-11-25."""
        definition: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.output_schema is not None:
            definition["outputSchema"] = self.output_schema
        annotations = {"idempotentHint": True} if self.idempotent else None
        if annotations:
            definition["annotations"] = annotations
        if with_execution:
            definition["execution"] = {"taskSupport": self.task_support}
        return definition


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (the unit of every size cap)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def arguments_digest(arguments: Any) -> str:
    """A stable digest of call arguments (compares retried submissions, S3): the hex
    SHA-256 of the one canonical encoding (``core.keys``), which refuses NaN."""
    return hashlib.sha256(canonical_json(arguments)).hexdigest()


def _is_context_annotation(annotation: Any) -> bool:
    return annotation is TaskContext or getattr(annotation, "__name__", None) == "TaskContext"


def build_tool_spec(
    function: ToolFunction,
    *,
    name: str | None,
    description: str | None,
    task: TaskSupport,
    poll_interval_ms: int,
    ttl_ms: int | None,
    idempotent: bool,
    output_schema: dict[str, Any] | None,
    ask_first: Mapping[str, Mapping[str, Any]] | None = None,
) -> ToolSpec:
    """Derive a ``ToolSpec`` (input schema, argument model) from a tool function: an
    ``async def``, or a plain ``def`` that then runs on a worker thread, so a blocking
    tool never stalls the event loop (as FastMCP runs one)."""
    if not callable(function):
        raise TypeError(f"a tool is a function, not {type(function).__name__}")
    if task not in TASK_SUPPORT_VALUES:
        raise ValueError(f"task must be one of {sorted(TASK_SUPPORT_VALUES)}, not {task!r}")
    if poll_interval_ms <= 0 or (ttl_ms is not None and ttl_ms <= 0):
        raise ValueError("poll_interval_ms and ttl_ms must be positive integers (milliseconds)")
    hints = get_type_hints(function, include_extras=True)
    context_parameter: str | None = None
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(function).parameters.values():
        annotation = hints.get(parameter.name, Any)
        if _is_context_annotation(annotation):
            context_parameter = parameter.name
            continue
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    if output_schema is None:
        output_schema = _declared_output_schema(hints.get("return"))
    tool_name = name or function.__name__
    if not inspect.iscoroutinefunction(function):
        if context_parameter is not None:
            raise TypeError(
                f"tool {tool_name!r} takes a TaskContext, whose methods are awaited:"
                " make it an async function"
            )
        function = _off_the_loop(function)
    runs: AsyncToolFunction = function
    model = pydantic.create_model(
        f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    schema = model.model_json_schema()
    schema.pop("title", None)
    schema.setdefault("properties", {})
    return ToolSpec(
        name=tool_name,
        description=description or inspect.getdoc(function) or "",
        function=runs,
        task_support=task,
        poll_interval_ms=poll_interval_ms,
        ttl_ms=ttl_ms,
        idempotent=idempotent,
        input_schema=schema,
        output_schema=output_schema,
        arguments_model=model,
        context_parameter=context_parameter,
        ask_first=_checked_questions(ask_first),
    )


def _off_the_loop(function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """A plain function as a coroutine function that runs it on a worker thread. A
    cancelled task stops waiting for it; the thread itself runs to its end."""

    @functools.wraps(function)
    async def run(**kwargs: Any) -> Any:
        return await asyncio.to_thread(function, **kwargs)

    return run


def _checked_questions(
    questions: Mapping[str, Mapping[str, Any]] | None,
) -> dict[str, dict[str, Any]] | None:
    if not questions:
        return None
    for key, request in questions.items():
        check_request(key, request)
    return {key: dict(request) for key, request in questions.items()}


def _declared_output_schema(annotation: Any) -> dict[str, Any] | None:
    """The output schema a function declares by returning a pydantic model."""
    if not (isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)):
        return None
    schema = annotation.model_json_schema()
    schema.pop("title", None)
    return schema


class ToolRegistry:
    """The tools one server serves, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}

    def add(self, spec: ToolSpec) -> None:
        """Register a tool; a name is served once."""
        if spec.name in self._tools:
            raise ValueError(f"tool {spec.name!r} is already registered")
        self._tools[spec.name] = spec

    def get(self, name: str) -> ToolSpec | None:
        """The tool of that name, if served."""
        return self._tools.get(name)

    def require(self, name: Any) -> ToolSpec:
        """The tool of that name; -32602 for an unknown one."""
        spec = self._tools.get(name) if isinstance(name, str) else None
        if spec is None:
            raise InvalidParams(f"Unknown tool: {name!r}")
        return spec

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._tools.values())

    def tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        task: TaskSupport = "optional",
        poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS,
        ttl_ms: int | None = DEFAULT_TTL_MS,
        idempotent: bool = False,
        output_schema: dict[str, Any] | None = None,
        ask_first: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Callable[[ToolFunction], ToolFunction]:
        """Decorator: serve an async function as a tool (S1); returns the function unchanged."""

        def register(function: ToolFunction) -> ToolFunction:
            self.add(
                build_tool_spec(
                    function,
                    name=name,
                    description=description,
                    task=task,
                    poll_interval_ms=poll_interval_ms,
                    ttl_ms=ttl_ms,
                    idempotent=idempotent,
                    output_schema=output_schema,
                    ask_first=ask_first,
                )
            )
            return function

        return register


def call_tool_result(value: Any) -> dict[str, Any]:
    """A ``CallToolResult`` body for a tool's return value (objects become structured content)."""
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict) and "content" in value and "isError" in value:
        return value
    if value is None:
        return {"content": [], "isError": False}
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}], "isError": False}
    text = json.dumps(value, ensure_ascii=False, default=str)
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(value, dict):
        result["structuredContent"] = value
    return result


def tool_error_result(message: str) -> dict[str, Any]:
    """A ``CallToolResult`` reporting a tool-level error (``isError: true``)."""
    return {"content": [{"type": "text", "text": message}], "isError": True}
