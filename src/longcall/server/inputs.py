"""Input before a task exists: SEP-2322 multi-round-trip requests (MRTR) for ``tools/call`` (S6).

Owns: the input-request vocabulary a tool author uses (``elicitation``, ``sampling``,
``roots``), which client capability each needs, the validation of an answer per method,
the integrity-protected ``requestState`` (HMAC-SHA256 over the tool, the arguments, the
principal and every answer gathered so far), and :class:`InputNeeded`, which a tool's
``ctx.request_inputs`` raises on a synchronous 2026-07-28 call to end the round with an
``InputRequiredResult``. Must not: do I/O or know HTTP.

The model: a synchronous call is re-run from the top each round with every answer
gathered so far (carried in ``requestState``, so any server process sharing the store's
secret can continue it), exactly as a client retries it; a task-capable tool may name
questions to settle before its task is created (``ask_first``): they are asked by MRTR,
and their answers are stored with the new task as already answered input requests.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types
import pydantic

from longcall.server.errors import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    InvalidParams,
    JsonRpcError,
)
from longcall.server.wire import validation_details

ELICIT = "elicitation/create"
SAMPLE = "sampling/createMessage"
ROOTS = "roots/list"
CAPABILITY_OF_METHOD = {ELICIT: "elicitation", SAMPLE: "sampling", ROOTS: "roots"}
"""MRTR rule (SEP-2322): never send an input request the client did not declare."""
RESULT_MODEL_OF_METHOD: dict[str, type[pydantic.BaseModel]] = {
    ELICIT: mcp_types.ElicitResult,
    SAMPLE: mcp_types.CreateMessageResult,
    ROOTS: mcp_types.ListRootsResult,
}
STATE_VERSION = 1


def elicitation(message: str, requested_schema: Mapping[str, Any]) -> dict[str, Any]:
    """A form ``elicitation/create`` input request."""
    params = {"mode": "form", "message": message, "requestedSchema": dict(requested_schema)}
    return {"method": ELICIT, "params": params}


def sampling(messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    """A ``sampling/createMessage`` input request."""
    return {"method": SAMPLE, "params": {"messages": messages, "maxTokens": max_tokens}}


def roots() -> dict[str, Any]:
    """A ``roots/list`` input request."""
    return {"method": ROOTS, "params": {}}


class InputNeeded(BaseException):
    """A synchronous round ends here: these requests (key → ``{method, params}``) go out.

    A ``BaseException`` (like ``asyncio.CancelledError``): a tool's ``except Exception``
    must not swallow the end of its round.
    """

    def __init__(self, requests: Mapping[str, Mapping[str, Any]]) -> None:
        super().__init__(f"input needed: {', '.join(requests)}")
        self.requests = {key: dict(value) for key, value in requests.items()}


def check_request(key: str, request: Mapping[str, Any]) -> None:
    """A tool's input request must name a known method with object params."""
    if request.get("method") not in CAPABILITY_OF_METHOD or not isinstance(
        request.get("params"), Mapping
    ):
        raise TypeError(
            f"input request {key!r} must be {{'method': one of {sorted(CAPABILITY_OF_METHOD)},"
            " 'params': {...}}"
        )


def missing_capability(requests: Mapping[str, Mapping[str, Any]], declared: Any) -> JsonRpcError:
    """-32021 naming the capabilities these requests need and the client did not declare."""
    needed = {
        CAPABILITY_OF_METHOD[str(request["method"])]
        for request in requests.values()
        if not _declares(declared, CAPABILITY_OF_METHOD[str(request["method"])])
    }
    return JsonRpcError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "this tool needs input the client did not declare it can give"
        f" ({', '.join(sorted(needed))})",
        {"requiredCapabilities": {name: {} for name in sorted(needed)}},
    )


def undeclared(requests: Mapping[str, Mapping[str, Any]], declared: Any) -> bool:
    """Whether any request needs a capability the client did not declare."""
    return any(
        not _declares(declared, CAPABILITY_OF_METHOD[str(request["method"])])
        for request in requests.values()
    )


def _declares(declared: Any, capability: str) -> bool:
    return isinstance(declared, Mapping) and isinstance(declared.get(capability), Mapping)


def validated_answer(key: str, method: str, value: Any) -> dict[str, Any]:
    """An answer checked against the result type of its request's method; -32602 otherwise."""
    if not isinstance(value, dict):
        raise InvalidParams(f"inputResponses[{key!r}] must be an object")
    model = RESULT_MODEL_OF_METHOD.get(method)
    if model is None:
        raise InvalidParams(f"inputResponses[{key!r}] answers an unknown request")
    try:
        parsed = model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise InvalidParams(
            f"inputResponses[{key!r}] is not a valid {method} result", validation_details(exc)
        ) from exc
    answer: dict[str, Any] = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
    answer.pop("_meta", None)
    return answer


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundState:
    """What a verified ``requestState`` carries: the answers so far and how many rounds."""

    answers: dict[str, dict[str, Any]]
    asked: dict[str, str]
    """key → method of every request sent so far (an answer must match its request)."""
    rounds: int


class RequestStates:
    """Signs and verifies ``requestState`` with a secret the store keeps for all processes."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _binding(self, tool: str, arguments_digest: str, principal: str) -> bytes:
        return json.dumps([tool, arguments_digest, principal]).encode()

    def seal(self, state: RoundState, *, tool: str, arguments_digest: str, principal: str) -> str:
        """An opaque, integrity-protected token of ``state`` for this call alone."""
        body = json.dumps(
            {"v": STATE_VERSION, "a": state.answers, "q": state.asked, "r": state.rounds},
            separators=(",", ":"),
        ).encode()
        mac = hmac.new(
            self._secret, self._binding(tool, arguments_digest, principal) + body, hashlib.sha256
        ).digest()
        return _b64(mac) + "." + _b64(body)

    def open(self, token: Any, *, tool: str, arguments_digest: str, principal: str) -> RoundState:
        """The state of a token this server sealed for the same call; -32602 for any other."""
        if not isinstance(token, str) or token.count(".") != 1:
            raise InvalidParams("requestState is not one this server issued")
        mac_text, body_text = token.split(".")
        try:
            mac, body = _unb64(mac_text), _unb64(body_text)
        except ValueError as exc:
            raise InvalidParams("requestState is not one this server issued") from exc
        expected = hmac.new(
            self._secret, self._binding(tool, arguments_digest, principal) + body, hashlib.sha256
        ).digest()
        if not hmac.compare_digest(mac, expected):
            raise InvalidParams("requestState failed its integrity check (tampered or foreign)")
        data = json.loads(body)
        return RoundState(answers=dict(data["a"]), asked=dict(data["q"]), rounds=int(data["r"]))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    """One ``tools/call`` in a SEP-2322 exchange: what is known, and how to ask for more."""

    state: RoundState
    states: RequestStates
    tool: str
    arguments_digest: str
    principal: str

    @classmethod
    def of(
        cls,
        params: Mapping[str, Any],
        *,
        states: RequestStates,
        tool: str,
        arguments_digest: str,
        principal: str,
        known_questions: Mapping[str, Mapping[str, Any]],
    ) -> Round:
        """The verified ``requestState`` of ``params`` plus its valid new ``inputResponses``.

        Keys never asked are ignored (SEP-2322 SHOULD); an answer that is not a valid
        result of its request's method, or a state this server did not seal for this very
        call, is -32602.
        """
        binding = {"tool": tool, "arguments_digest": arguments_digest, "principal": principal}
        token = params.get("requestState")
        state = RoundState(answers={}, asked={}, rounds=0)
        if token is not None:
            state = states.open(token, **binding)
        responses = params.get("inputResponses")
        if responses is not None:
            if not isinstance(responses, dict):
                raise InvalidParams("params.inputResponses must be an object")
            answers = dict(state.answers)
            for key, value in responses.items():
                question = known_questions.get(key)
                method = state.asked.get(key) or (question or {}).get("method")
                if isinstance(method, str):
                    answers[key] = validated_answer(key, method, value)
            state = RoundState(answers=answers, asked=state.asked, rounds=state.rounds)
        return cls(state=state, states=states, **binding)

    def input_required(self, requests: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The ``InputRequiredResult`` ending this round, with the state of the next."""
        asked = {**self.state.asked, **{key: str(req["method"]) for key, req in requests.items()}}
        following = RoundState(
            answers=self.state.answers, asked=asked, rounds=self.state.rounds + 1
        )
        token = self.states.seal(
            following,
            tool=self.tool,
            arguments_digest=self.arguments_digest,
            principal=self.principal,
        )
        return {
            "resultType": "input_required",
            "inputRequests": {key: dict(request) for key, request in requests.items()},
            "requestState": token,
        }
