"""Digests and deterministic idempotency keys (SPEC X2, L5, C2).

A replay after a crash must send the same submission key as the first attempt, so
the key is a pure function of the caller's key, the call node id and the step index:
never a random value, never a clock reading. The caller's key (a secret of the ledger,
created with it) scopes submission keys to one caller: another ledger calling the same
node name at the same server derives another key, so only the same caller's retry can
ever meet its earlier submission, and nobody can block or read a node name by guessing
its key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import unicodedata
from typing import Any

from longcall.errors import InvalidCallNode

SUBMISSION_KEY_PREFIX = "lc2-"
UNSCOPED_KEY_PREFIX = "lc1-"
"""Keys derived without a caller key (records built outside a ledger: tests, tools)."""


_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def canonical_json(value: Any) -> bytes:
    """The one byte encoding we hash: sorted keys, no spaces, UTF-8, no NaN (one
    encoder for every call: ``json.dumps`` with options builds a new one each time)."""
    return _CANONICAL.encode(value).encode("utf-8")


def digest_bytes(payload: bytes) -> str:
    """``sha256:<hex>`` of raw bytes."""
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def digest_json(value: Any) -> str:
    """Digest of the canonical JSON encoding of ``value``."""
    return digest_bytes(canonical_json(value))


def request_digest(tool_name: str, arguments: Any) -> str:
    """What makes two calls of one call node "the same request" (X2)."""
    return digest_json({"tool": tool_name, "arguments": arguments})


def derive_submission_key(
    call_node_id: str, step_index: int = 0, *, caller_key: bytes | None = None
) -> str:
    """The submission idempotency key of one step of one call node (X2), scoped to the
    caller by ``caller_key`` (C2): an HMAC, so the key reveals nothing of the secret.

    Length-prefixing the node id keeps ``("a:1", 0)`` and ``("a", 10)`` apart.
    """
    if step_index < 0:
        raise ValueError("step_index must be >= 0")
    material = f"{len(call_node_id)}:{call_node_id}:{step_index}".encode()
    if caller_key is None:
        return UNSCOPED_KEY_PREFIX + hashlib.sha256(material).hexdigest()[:32]
    mac = hmac.new(caller_key, material, hashlib.sha256).hexdigest()
    return SUBMISSION_KEY_PREFIX + mac[:32]


CALL_NODE_ID_MAX = 512
"""Characters a call node id may have: it is a key, printed on every line about it."""
_UNPRINTABLE = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
"""Unicode categories of control, format (direction overrides), surrogate, private,
unassigned and line or paragraph separator characters."""


def first_unprintable(text: str) -> str | None:
    """The first character a terminal would obey rather than show (a control, a
    direction override, a line break) or cannot show, or None: for names printed on a
    line of their own."""
    return next((ch for ch in text if unicodedata.category(ch) in _UNPRINTABLE), None)


def check_call_node_id(node: str) -> None:
    """Refuse (:class:`InvalidCallNode`) an id that cannot be stored and shown as given."""
    if not isinstance(node, str) or not node or len(node) > CALL_NODE_ID_MAX:
        shown = f"{len(node)} characters" if isinstance(node, str) and node else repr(node)
        raise InvalidCallNode(f"a call node id is 1 to {CALL_NODE_ID_MAX} characters, not {shown}")
    bad = first_unprintable(node)
    if bad is not None:
        raise InvalidCallNode(
            f"the call node id '{node.encode('unicode_escape').decode('ascii')}' holds"
            f" U+{ord(bad):04X}, a control or formatting character"
        )
