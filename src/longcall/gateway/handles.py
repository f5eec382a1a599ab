"""Handles a model can carry but cannot corrupt, and the call nodes they name (G1).

Owns: the handle format (``lc-`` + 8 Crockford base32 characters + one check character,
shown as ``lc-xxxx-xxxxx``), its check character (Damm's algorithm over GF(32): every
single-character change and every swap of two neighbours is caught), the refusal of a
handle that is not one (typed, with the reason), and the derivation of a host call's
handle and call node from (principal, tool, canonical arguments digest, repeat counter).

The call node embeds a digest of the principal, so the same handle given by another
principal names another node, which does not exist: another principal's handle reads
exactly like an invented one ("not found"). Must not: read the ledger, the clock or
randomness (every function here is pure).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re

from longcall.errors import HandleRefused

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
"""Crockford's base32 without the letters a reader confuses (i, l, o, u)."""
DATA_CHARS = 8
"""40 bits: one principal's calls never collide in practice (a repeat counter tells
deliberate repeats apart)."""
PREFIX = "lc-"
NODE_PREFIX = "gateway"
_GF32_POLY = 0b100101
"""x^5 + x^2 + 1, irreducible: GF(32) for the check character's quasigroup."""
_SHAPE = re.compile(r"^lc-([0-9a-z]{4})-([0-9a-z]{5})$")


def _times_two(value: int) -> int:
    """Multiply by x in GF(32)."""
    value <<= 1
    return value ^ _GF32_POLY if value & 0b100000 else value


def _damm(values: list[int]) -> int:
    """Damm's interim over the quasigroup ``a∘b = 2a + b`` in GF(32) (totally
    anti-symmetric since 2 ≠ 0, 1): 0 for a string that ends in its check character."""
    interim = 0
    for value in values:
        interim = _times_two(interim) ^ value
    return interim


def check_character(data: str) -> str:
    """The character that makes ``data`` + it a valid handle body."""
    return ALPHABET[_times_two(_damm([ALPHABET.index(c) for c in data]))]


def format_handle(data: str) -> str:
    """``lc-xxxx-xxxxc`` for 8 data characters (the last shown one is the check)."""
    if len(data) != DATA_CHARS or any(c not in ALPHABET for c in data):
        raise ValueError(f"handle data must be {DATA_CHARS} base32 characters")
    body = data + check_character(data)
    return f"{PREFIX}{body[:4]}-{body[4:]}"


def parse_handle(handle: object) -> str:
    """The canonical handle, or HandleRefused saying why (case and surrounding blanks
    are forgiven; nothing else is: a look-alike letter is a mistype)."""
    if not isinstance(handle, str) or not handle.strip():
        raise HandleRefused(handle, "a handle is a string like lc-7k2m-9qx4t")
    text = handle.strip().lower()
    match = _SHAPE.match(text)
    if match is None:
        bare = text.removeprefix(PREFIX).replace("-", "")
        if text.startswith(PREFIX) and all(c in ALPHABET for c in bare):
            if len(bare) < DATA_CHARS + 1:
                return _refuse(handle, f"it is cut short ({len(bare)} of 9 characters)")
            if len(bare) > DATA_CHARS + 1:
                return _refuse(handle, f"it is too long ({len(bare)} of 9 characters)")
        return _refuse(handle, "handles look like lc-7k2m-9qx4t (letters i, l, o, u never occur)")
    body = match.group(1) + match.group(2)
    if any(c not in ALPHABET for c in body):
        return _refuse(handle, "it holds a letter handles never use (i, l, o or u)")
    if _damm([ALPHABET.index(c) for c in body]) != 0:
        return _refuse(handle, "its check character does not match (a mistyped character?)")
    return f"{PREFIX}{body[:4]}-{body[4:]}"


def _refuse(handle: object, reason: str) -> str:
    raise HandleRefused(handle, reason)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HostCall:
    """What makes two host calls "the same call": who, which tool, which arguments."""

    principal: str
    tool: str
    """The tool as the host named it (the gateway's name for it)."""
    arguments_digest: str
    """sha256 of the canonical JSON of the arguments."""


def handle_for(key: bytes, call: HostCall, repeat: int) -> str:
    """The handle of the ``repeat``-th deliberate repeat of ``call`` (0: the first).

    Keyed by the ledger's own secret, so handles say nothing about the arguments and two
    gateways on different ledgers do not issue the same ones."""
    message = "\x1f".join((call.principal, call.tool, call.arguments_digest, str(repeat)))
    digest = hmac.new(key, message.encode(), hashlib.sha256).digest()
    number = int.from_bytes(digest[:5], "big")
    data = "".join(ALPHABET[(number >> (5 * i)) & 31] for i in reversed(range(DATA_CHARS)))
    return format_handle(data)


def principal_tag(principal: str) -> str:
    """A short digest of the principal, part of every call node id it owns."""
    return hashlib.sha256(principal.encode()).hexdigest()[:16]


def node_prefix(principal: str) -> str:
    """What every call node id this principal owns starts with."""
    return f"{NODE_PREFIX}:{principal_tag(principal)}:"


def node_for(principal: str, handle: str) -> str:
    """The call node a (canonical) handle names for this principal."""
    return f"{node_prefix(principal)}{handle}"


def handle_of_node(node: str) -> str | None:
    """The handle inside a gateway call node id, or None for another node."""
    parts = node.split(":")
    if len(parts) == 3 and parts[0] == NODE_PREFIX:
        return parts[2]
    return None


def owned_by(node: str, principal: str) -> bool:
    """Whether a gateway call node belongs to ``principal``."""
    parts = node.split(":")
    return len(parts) == 3 and parts[0] == NODE_PREFIX and parts[1] == principal_tag(principal)
