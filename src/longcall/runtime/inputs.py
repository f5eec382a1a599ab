"""Input requests and their answers (SPEC X4): what a person is asked, and what is sent.

Owns: keeping each input request the server sends (its question and its form) in the
ledger under its key when it is observed; reading the pending round back as an
:class:`InputRequest`; checking an answer against its form *before* it is stored
(:func:`validate_answer`), so a wrong-shaped answer never reaches the server; building a
form answer from fields typed as text (``approved=true``); and where answers are
stored: one write-once blob per (round, key), so an answer the server refused can be
replaced by a better one in the next round.

Must not: send anything or decide a state (the machine does); trust a stored request to
be well-formed (it came from a server).

Input requests come as the MCP wire has them, ``{key: {"method", "params"}}``; a form is
an ``elicitation/create`` whose ``params.requestedSchema`` is a flat object of primitive
fields, and its answer is an ``ElicitResult`` (``{"action": "accept", "content": {…}}``,
or ``decline`` / ``cancel``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping
from typing import Any

from longcall.core import OperationRecord
from longcall.core.keys import canonical_json
from longcall.errors import BlobConflict, InvalidAnswer
from longcall.ledger import Ledger

log = logging.getLogger("longcall.inputs")

REQUEST_BLOB_PREFIX = "input-request:"
"""The input request a server sent under a key (its question and form), per key."""
ANSWER_BLOB_PREFIX = "input:"
"""An answer, per round and key: ``input:<round>:<key>``."""
FORM_METHOD = "elicitation/create"
ACTIONS = ("accept", "decline", "cancel")
_TRUE = frozenset({"true", "yes", "y", "1", "on"})
_FALSE = frozenset({"false", "no", "n", "0", "off"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InputField:
    """One field of a form."""

    name: str
    type: str | None
    required: bool
    description: str | None = None
    choices: tuple[Any, ...] | None = None
    """The allowed values, where the form lists them (``enum``)."""

    def example(self) -> str:
        """A value to show in a ready-to-paste answer."""
        if self.choices:
            return str(self.choices[0])
        return {"boolean": "true", "integer": "1", "number": "1.0"}.get(self.type or "", "TEXT")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InputQuestion:
    """One input request of a round: the server's question under its key."""

    key: str
    method: str
    message: str | None
    schema: Mapping[str, Any] | None
    """The form (``requestedSchema``) of an ``elicitation/create``, if it has one."""

    @property
    def is_form(self) -> bool:
        return self.method == FORM_METHOD and self.schema is not None

    @property
    def fields(self) -> tuple[InputField, ...]:
        if not self.is_form or self.schema is None:
            return ()
        properties = self.schema.get("properties")
        required = self.schema.get("required")
        required_names = set(required) if isinstance(required, list) else set()
        if not isinstance(properties, Mapping):
            return ()
        out: list[InputField] = []
        for name, spec in properties.items():
            spec = spec if isinstance(spec, Mapping) else {}
            enum = spec.get("enum")
            description = spec.get("description") or spec.get("title")
            out.append(
                InputField(
                    name=str(name),
                    type=spec.get("type") if isinstance(spec.get("type"), str) else None,
                    required=name in required_names,
                    description=str(description) if description is not None else None,
                    choices=tuple(enum) if isinstance(enum, list) else None,
                )
            )
        return tuple(out)

    def accept(self, **content: Any) -> dict[str, Any]:
        """The answer that submits this form with ``content`` (checked against the form)."""
        answer = {"action": "accept", "content": dict(content)}
        checked: dict[str, Any] = validate_answer(self, answer)
        return checked

    def decline(self) -> dict[str, Any]:
        """The answer that says no."""
        return {"action": "decline"}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class InputRequest:
    """The input an operation waits for: the questions of its current round."""

    call_node_id: str
    input_round: int
    questions: tuple[InputQuestion, ...]
    deadline_at: float | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(q.key for q in self.questions)

    def question(self, key: str) -> InputQuestion:
        for question in self.questions:
            if question.key == key:
                return question
        raise KeyError(key)

    def accept(self, **content: Any) -> dict[str, dict[str, Any]]:
        """Answers submitting every form of the round with the ``content`` fields each
        form asks for (checked: a missing required field raises InvalidAnswer)."""
        return {q.key: q.accept(**_known_fields(q, content)) for q in self.questions}

    def decline(self) -> dict[str, dict[str, Any]]:
        """Answers declining every question of the round."""
        return {q.key: q.decline() for q in self.questions}


# --- requests: stored when observed, read back for people ----------------------------


def store_requests(ledger: Ledger, call_node_id: str, payload: bytes) -> None:
    """Keep each input request of an observed round (``{key: request}`` JSON) under its
    key. Keys are unique for an operation's life, so the first request under a key is
    kept; a different one later under the same key is the server's contradiction."""
    try:
        requests = json.loads(payload)
    except ValueError:
        log.warning("%s: input requests are not JSON; not kept", call_node_id)
        return
    if not isinstance(requests, Mapping):
        return
    for key, request in requests.items():
        try:
            ledger.put_blob(call_node_id, REQUEST_BLOB_PREFIX + str(key), canonical_json(request))
        except BlobConflict:
            log.warning(
                "%s: the server changed input request %r; the first is kept", call_node_id, key
            )
        except ValueError:
            log.warning("%s: input request %r cannot be stored as JSON", call_node_id, key)


def question_of(ledger: Ledger, call_node_id: str, key: str) -> InputQuestion | None:
    """The stored question under ``key``, or None when the server sent none we kept."""
    raw = ledger.blob(call_node_id, REQUEST_BLOB_PREFIX + key)
    if raw is None:
        return None
    try:
        request = json.loads(raw)
    except ValueError:
        return None
    return _question(key, request)


def pending_request(ledger: Ledger, record: OperationRecord) -> InputRequest | None:
    """The input the operation waits for now, or None when it waits for none."""
    if not record.input_keys_pending:
        return None
    questions = tuple(
        question_of(ledger, record.call_node_id, key)
        or InputQuestion(key=key, method="", message=None, schema=None)
        for key in record.input_keys_pending
    )
    return InputRequest(
        call_node_id=record.call_node_id,
        input_round=record.input_round,
        questions=questions,
        deadline_at=record.input_deadline_at,
    )


def _question(key: str, request: Any) -> InputQuestion:
    request = request if isinstance(request, Mapping) else {}
    params = request.get("params")
    params = params if isinstance(params, Mapping) else {}
    method = request.get("method")
    message = params.get("message")
    schema = params.get("requestedSchema")
    form = method == FORM_METHOD and params.get("mode", "form") == "form"
    return InputQuestion(
        key=key,
        method=str(method) if isinstance(method, str) else "",
        message=str(message) if isinstance(message, str) else None,
        schema=schema if form and isinstance(schema, Mapping) else None,
    )


# --- answers: checked before they are stored ------------------------------------------


def validate_answer(question: InputQuestion | None, answer: Any) -> Any:
    """``answer`` if it fits ``question``; raises InvalidAnswer otherwise.

    An answer is plain JSON; to a known request, a JSON object. A form's answer is an
    ``ElicitResult``: an ``action``, and for ``accept`` a ``content`` of primitive values
    that the form's schema accepts. Other requests (sampling, roots, a URL elicitation)
    are checked for shape only, and an answer to a request we did not keep (a protocol
    that sends none) only for being JSON.
    """
    _check_json(answer)
    if question is None:
        return answer
    if not isinstance(answer, Mapping):
        raise InvalidAnswer(f"an answer is a JSON object, not {_kind(answer)}")
    answer = dict(answer)
    if question.method != FORM_METHOD:
        return answer
    action = answer.get("action")
    if action not in ACTIONS:
        raise InvalidAnswer(f"'action' must be one of {', '.join(ACTIONS)}, not {action!r}")
    extra = sorted(set(answer) - {"action", "content", "_meta"})
    if extra:
        raise InvalidAnswer(f"unexpected member(s) {', '.join(extra)} in the answer")
    content = answer.get("content")
    if action != "accept":
        if content is not None:
            raise InvalidAnswer(f"a {action} answer carries no content")
        return answer
    if question.schema is None:
        return answer
    if not isinstance(content, Mapping):
        raise InvalidAnswer(f"an accepted form needs 'content', a JSON object ({_hint(question)})")
    for name, value in content.items():
        if not _primitive(value):
            raise InvalidAnswer(
                f"field {name!r}: a form value is a string, number, boolean or list of strings"
            )
    _check_schema(question, content)
    return answer


def answer_from_fields(question: InputQuestion, fields: Mapping[str, str]) -> dict[str, Any]:
    """An ``accept`` answer to a form from ``name=text`` fields, each text read as the
    form's type for that field (``true``/``false`` for a boolean, a number…)."""
    if not question.is_form:
        raise InvalidAnswer(
            f"input {question.key!r} is not a form ({question.method or 'unknown request'});"
            " answer it with a whole JSON answer"
        )
    known = {f.name: f for f in question.fields}
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise InvalidAnswer(
            f"the form has no field {', '.join(map(repr, unknown))} ({_hint(question)})"
        )
    content = {name: _read_field(known[name], text) for name, text in fields.items()}
    checked: dict[str, Any] = validate_answer(question, {"action": "accept", "content": content})
    return checked


def answers_from_form_fields(
    request: InputRequest, fields: Mapping[str, str]
) -> dict[str, Any] | None:
    """Answers to every form of a round from ``name=text`` fields given up front (``call
    --answer``), checked as ``ops answer`` checks them: a field no form of the round has
    (a typo), or a text its field cannot read, is InvalidAnswer; None when the fields do
    not cover each form's required fields, or a question is no form (a person answers)."""
    if not fields:
        return None
    forms = [q for q in request.questions if q.is_form]
    unknown = sorted(set(fields) - {f.name for q in forms for f in q.fields})
    if unknown and forms:
        hints = "; ".join(_hint(q) for q in forms)
        raise InvalidAnswer(f"the form has no field {', '.join(map(repr, unknown))} ({hints})")
    if len(forms) != len(request.questions):
        return None
    answers: dict[str, Any] = {}
    for question in forms:
        given = {k: v for k, v in fields.items() if k in {f.name for f in question.fields}}
        if not all(f.name in given for f in question.fields if f.required):
            return None
        answers[question.key] = answer_from_fields(question, given)
    return answers


def _known_fields(question: InputQuestion, content: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in question.fields}
    return {k: v for k, v in content.items() if k in names} if names else dict(content)


def _read_field(field: InputField, text: str) -> Any:
    value: Any
    if field.type == "boolean":
        lowered = text.strip().lower()
        if lowered not in _TRUE | _FALSE:
            raise InvalidAnswer(
                f"field {field.name!r} is a boolean: use true or false, not {text!r}"
            )
        value = lowered in _TRUE
    elif field.type in ("integer", "number"):
        try:
            value = int(text) if field.type == "integer" else float(text)
        except ValueError:
            raise InvalidAnswer(f"field {field.name!r} is a {field.type}, not {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidAnswer(f"field {field.name!r}: {text!r} is not a finite number")
    elif field.type == "array":
        value = [part.strip() for part in text.split(",") if part.strip()]
    else:
        value = text
    return value


def _check_schema(question: InputQuestion, content: Mapping[str, Any]) -> None:
    # On first use: an engine that never meets a form never pays for jsonschema.
    import jsonschema

    from longcall.adapters.binding import checked_validator

    try:
        validator = checked_validator(canonical_json(question.schema or {}))
        error = jsonschema.exceptions.best_match(validator.iter_errors(dict(content)))
    except jsonschema.exceptions.SchemaError as exc:
        # The server's form is broken; the server is the judge of the answer then.
        log.warning("input %r: the form's schema is invalid (%s)", question.key, exc.message)
        return
    except (ValueError, TypeError) as exc:  # not plain JSON (a NaN), so no schema either
        log.warning("input %r: the form's schema is invalid (%s)", question.key, exc)
        return
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path)
        prefix = f"field {where!r}: " if where else ""
        raise InvalidAnswer(f"{prefix}{error.message} ({_hint(question)})")


def _check_json(answer: Any) -> None:
    try:
        canonical_json(answer)
    except (ValueError, TypeError, RecursionError, UnicodeEncodeError) as exc:
        raise InvalidAnswer(f"the answer is not plain JSON: {exc}") from None


def _primitive(value: Any) -> bool:
    if value is None or isinstance(value, str | bool | int | float):
        return True
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _hint(question: InputQuestion) -> str:
    fields = question.fields
    if not fields:
        return "the form names no fields"
    parts = [f"{f.name}{'' if f.required else '?'}: {f.type or 'any'}" for f in fields]
    return "fields: " + ", ".join(parts)


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), "an array" if isinstance(value, list) else type(value).__name__
    )


def answer_blob(input_round: int, key: str) -> str:
    """Where the answer given in ``input_round`` to ``key`` is stored."""
    return f"{ANSWER_BLOB_PREFIX}{input_round}:{key}"


def read_answer(ledger: Ledger, record: OperationRecord, key: str) -> Any | None:
    """The latest answer to ``key`` (its newest round first); None when there is none.

    A key is answered again only after the server refused an answer, in a later round,
    so the newest stored round is the answer in force."""
    for input_round in range(record.input_round, 0, -1):
        raw = ledger.blob(record.call_node_id, answer_blob(input_round, key))
        if raw is not None:
            return json.loads(raw)
    legacy = ledger.blob(record.call_node_id, ANSWER_BLOB_PREFIX + key)
    return json.loads(legacy) if legacy is not None else None


__all__ = [
    "InputField",
    "InputQuestion",
    "InputRequest",
    "InvalidAnswer",
    "answer_blob",
    "answer_from_fields",
    "answers_from_form_fields",
    "pending_request",
    "question_of",
    "read_answer",
    "store_requests",
    "validate_answer",
]
