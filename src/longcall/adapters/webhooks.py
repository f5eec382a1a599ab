"""Standard Webhooks, the wire format: keys, signing, verification, and webhook-id dedup.

Owns: reading ``whsec_`` / ``whsk_`` / ``whpk_`` keys, the signed content
(``id.timestamp.body`` over the exact bytes), the ``webhook-signature`` list (``v1`` =
HMAC-SHA256, ``v1a`` = ed25519, several at once while keys rotate), verification in
constant time inside a tolerance window, and a bounded in-memory set of the ids seen
within that window.
Must not: read a clock (every time is passed in, so tests and replays choose it), touch
a socket, or know what a delivery means to an operation: the receiver in
:mod:`longcall.runtime.webhooks` does, and it only ever turns one into a sooner poll.

Every malformed input is a typed :class:`~longcall.errors.WebhookRejected` (or, for a
key that cannot be read, :class:`~longcall.errors.InvalidWebhookKey`), never a bare
``ValueError`` or ``binascii.Error``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from longcall.errors import (
    InvalidWebhookKey,
    WebhookBadSignature,
    WebhookDuplicate,
    WebhookFromFuture,
    WebhookMalformed,
    WebhookStale,
)

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"

DEFAULT_TOLERANCE_S = 300.0
"""Five minutes either side, the spec's and the reference library's window."""
ID_MAX_CHARS = 256
SIGNATURE_HEADER_MAX_CHARS = 8192
SIGNATURES_MAX = 16
"""More signatures than any rotation needs is an attempt to make us compute: refused."""
TIMESTAMP_MAX_DIGITS = 12

_ID_CHARS = re.compile(r"[\x21-\x2d\x2f-\x7e]+")
"""Printable ASCII without a space or a dot: a dot would make ``id.timestamp.body`` ambiguous."""
_SECRET_BYTES = (24, 64)
"""The spec's range for a ``whsec_`` secret; shorter is refused, longer is accepted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HmacKey:
    """A ``v1`` shared secret (``whsec_`` + base64): it both signs and verifies."""

    secret: bytes

    version = "v1"

    def sign(self, content: bytes) -> bytes:
        return hmac.new(self.secret, content, hashlib.sha256).digest()

    def verifies(self, content: bytes, signature: bytes) -> bool:
        return hmac.compare_digest(self.sign(content), signature)

    def encoded(self) -> str:
        return "whsec_" + base64.b64encode(self.secret).decode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Ed25519SigningKey:
    """A ``v1a`` private key (``whsk_`` + base64 of the 32-byte seed): it signs, and
    verifies through its public half."""

    private: Ed25519PrivateKey

    version = "v1a"

    def sign(self, content: bytes) -> bytes:
        return self.private.sign(content)

    def verifies(self, content: bytes, signature: bytes) -> bool:
        return self.public_key().verifies(content, signature)

    def public_key(self) -> Ed25519VerifyKey:
        return Ed25519VerifyKey(public=self.private.public_key())

    def encoded(self) -> str:
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        seed = self.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return "whsk_" + base64.b64encode(seed).decode()


@dataclass(frozen=True, slots=True, kw_only=True)
class Ed25519VerifyKey:
    """A ``v1a`` public key (``whpk_`` + base64 of the 32 raw bytes): it only verifies."""

    public: Ed25519PublicKey

    version = "v1a"

    def verifies(self, content: bytes, signature: bytes) -> bool:
        try:
            self.public.verify(signature, content)
        except InvalidSignature:
            return False
        return True

    def encoded(self) -> str:
        raw = self.public.public_bytes(Encoding.Raw, PublicFormat.Raw)
        return "whpk_" + base64.b64encode(raw).decode()


SigningKey = HmacKey | Ed25519SigningKey
VerifyKey = HmacKey | Ed25519SigningKey | Ed25519VerifyKey


def _b64(text: str, *, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidWebhookKey(f"{what} is not base64 after its prefix") from None


def parse_key(text: str) -> VerifyKey:
    """A key as Standard Webhooks writes it: ``whsec_…`` (v1), ``whsk_…`` or ``whpk_…``
    (v1a). The key itself is never quoted in an error."""
    text = text.strip()
    if text.startswith("whsec_"):
        secret = _b64(text.removeprefix("whsec_"), what="a whsec_ secret")
        if len(secret) < _SECRET_BYTES[0]:
            raise InvalidWebhookKey(
                f"a whsec_ secret needs at least {_SECRET_BYTES[0]} bytes, this one has "
                f"{len(secret)}"
            )
        return HmacKey(secret=secret)
    if text.startswith("whsk_"):
        raw = _b64(text.removeprefix("whsk_"), what="a whsk_ key")
        if len(raw) not in (32, 64):
            raise InvalidWebhookKey("a whsk_ key is a 32-byte ed25519 seed (or seed + public)")
        key = Ed25519SigningKey(private=Ed25519PrivateKey.from_private_bytes(raw[:32]))
        if len(raw) == 64 and key.public_key().encoded() != "whpk_" + _b64text(raw[32:]):
            raise InvalidWebhookKey("a whsk_ key's public half does not match its seed")
        return key
    if text.startswith("whpk_"):
        raw = _b64(text.removeprefix("whpk_"), what="a whpk_ key")
        if len(raw) != 32:
            raise InvalidWebhookKey("a whpk_ key is a 32-byte ed25519 public key")
        return Ed25519VerifyKey(public=Ed25519PublicKey.from_public_bytes(raw))
    raise InvalidWebhookKey("a webhook key starts with whsec_, whsk_ or whpk_")


def parse_keys(text: str) -> tuple[VerifyKey, ...]:
    """Several keys separated by spaces or commas (old and new while rotating)."""
    keys = tuple(parse_key(part) for part in re.split(r"[\s,]+", text) if part)
    if not keys:
        raise InvalidWebhookKey("no webhook key given")
    return keys


def _b64text(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    """What is signed: ``id.timestamp.body``, over the exact bytes of the body."""
    return f"{msg_id}.{timestamp}.".encode() + body


def sign(keys: Sequence[SigningKey], *, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers of one delivery, signed with every key given (rotation sends
    the old and the new signature at once)."""
    _check_id(msg_id)
    if not keys:
        raise InvalidWebhookKey("signing needs at least one key")
    content = signed_content(msg_id, timestamp, body)
    signatures = " ".join(f"{key.version},{_b64text(key.sign(content))}" for key in keys)
    return {ID_HEADER: msg_id, TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signatures}


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifiedDelivery:
    """A delivery whose signature, timestamp and id passed: its bytes, still unread."""

    msg_id: str
    timestamp: int
    body: bytes


class SeenIds:
    """The webhook-ids verified within the tolerance window, each kept until its
    expiry by the clock passed in; bounded, so a flood cannot grow it without end
    (when full, the oldest goes first: a replay it then lets through is only one
    more hint, and the poll floor still holds)."""

    def __init__(self, *, window_s: float, max_ids: int = 100_000) -> None:
        self.window_s = window_s
        self.max_ids = max_ids
        self._expiry: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._expiry)

    def add(self, msg_id: str, *, now: float) -> bool:
        """Record ``msg_id``; False when it was already seen within the window."""
        self._expire(now)
        if msg_id in self._expiry:
            return False
        while len(self._expiry) >= self.max_ids:
            self._expiry.popitem(last=False)
        self._expiry[msg_id] = now + self.window_s
        return True

    def _expire(self, now: float) -> None:
        # Insertion order is expiry order (one window for all), so stop at the first live id.
        while self._expiry:
            msg_id, expiry = next(iter(self._expiry.items()))
            if expiry > now:
                return
            del self._expiry[msg_id]


class Verifier:
    """Verifies deliveries against one or more keys (any one may match: rotation),
    inside ``tolerance_s`` of the clock reading passed in, each id only once."""

    def __init__(
        self,
        keys: Iterable[VerifyKey],
        *,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        max_ids: int = 100_000,
    ) -> None:
        self.keys = tuple(keys)
        if not self.keys:
            raise InvalidWebhookKey("verifying needs at least one key")
        if not tolerance_s > 0:
            raise ValueError(f"tolerance_s must be above 0, not {tolerance_s!r}")
        self.tolerance_s = tolerance_s
        # An id must be remembered as long as its timestamp can still pass: both sides.
        self.seen = SeenIds(window_s=2 * tolerance_s, max_ids=max_ids)

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: float) -> VerifiedDelivery:
        """The delivery if it verifies; otherwise the typed reason it does not. The id
        is recorded only once everything else passed, so a forgery cannot burn it."""
        msg_id, timestamp, signatures = _read_headers(headers)
        content = signed_content(msg_id, timestamp, body)
        if not self._any_matches(content, signatures):
            raise WebhookBadSignature("no signature matches a key of this receiver")
        if timestamp < now - self.tolerance_s:
            raise WebhookStale(f"the timestamp is more than {self.tolerance_s:g} s old")
        if timestamp > now + self.tolerance_s:
            raise WebhookFromFuture(
                f"the timestamp is more than {self.tolerance_s:g} s in the future"
            )
        if not self.seen.add(msg_id, now=now):
            raise WebhookDuplicate("this webhook-id was already received")
        return VerifiedDelivery(msg_id=msg_id, timestamp=timestamp, body=body)

    def _any_matches(self, content: bytes, signatures: list[tuple[str, bytes]]) -> bool:
        # Every pair is tried (no early exit on the first mismatch of a version), and
        # each comparison is constant-time: the answer's timing tells nothing of a key.
        matched = False
        for version, signature in signatures:
            for key in self.keys:
                if key.version == version and key.verifies(content, signature):
                    matched = True
        return matched


def _header(headers: Mapping[str, str], name: str) -> str:
    """A header by its name in any case; a missing one is malformed."""
    for key, value in headers.items():
        if key.lower() == name:
            return value
    raise WebhookMalformed(f"the {name} header is missing")


def _check_id(msg_id: str) -> None:
    if not msg_id or len(msg_id) > ID_MAX_CHARS or not _ID_CHARS.fullmatch(msg_id):
        raise WebhookMalformed(
            f"the {ID_HEADER} header must be 1 to {ID_MAX_CHARS} printable ASCII "
            "characters without a space or a dot"
        )


def _read_headers(headers: Mapping[str, str]) -> tuple[str, int, list[tuple[str, bytes]]]:
    msg_id = _header(headers, ID_HEADER)
    _check_id(msg_id)
    stamp = _header(headers, TIMESTAMP_HEADER)
    if not stamp.isascii() or not stamp.isdigit() or len(stamp) > TIMESTAMP_MAX_DIGITS:
        raise WebhookMalformed(f"the {TIMESTAMP_HEADER} header must be Unix seconds")
    return msg_id, int(stamp), _read_signatures(_header(headers, SIGNATURE_HEADER))


def _read_signatures(text: str) -> list[tuple[str, bytes]]:
    """``version,base64`` items separated by spaces; versions we do not know are
    skipped (the spec lets a sender add schemes), but one at least must be ours."""
    if len(text) > SIGNATURE_HEADER_MAX_CHARS:
        raise WebhookMalformed(f"the {SIGNATURE_HEADER} header is too long")
    items = text.split()
    if not items or len(items) > SIGNATURES_MAX:
        raise WebhookMalformed(
            f"the {SIGNATURE_HEADER} header must hold 1 to {SIGNATURES_MAX} signatures"
        )
    read: list[tuple[str, bytes]] = []
    for item in items:
        version, comma, encoded = item.partition(",")
        if not comma or not version or not encoded:
            raise WebhookMalformed(f"each item of the {SIGNATURE_HEADER} header is version,base64")
        if version not in ("v1", "v1a"):
            continue
        try:
            read.append((version, base64.b64decode(encoded, validate=True)))
        except (binascii.Error, ValueError):
            raise WebhookMalformed(f"a {version} signature is not base64") from None
    if not read:
        raise WebhookMalformed(f"the {SIGNATURE_HEADER} header holds no v1 or v1a signature")
    return read


def new_hmac_key(random_bytes: bytes) -> HmacKey:
    """A ``v1`` key from random bytes the caller drew (24 to 64 of them)."""
    if not _SECRET_BYTES[0] <= len(random_bytes) <= _SECRET_BYTES[1]:
        raise InvalidWebhookKey("a whsec_ secret is 24 to 64 random bytes")
    return HmacKey(secret=random_bytes)


def ed25519_key_from_seed(seed: bytes) -> Ed25519SigningKey:
    """A ``v1a`` signing key from a 32-byte seed."""
    if len(seed) != 32:
        raise InvalidWebhookKey("an ed25519 seed is 32 bytes")
    return Ed25519SigningKey(private=Ed25519PrivateKey.from_private_bytes(seed))


__all__ = [
    "DEFAULT_TOLERANCE_S",
    "ID_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Ed25519SigningKey",
    "Ed25519VerifyKey",
    "HmacKey",
    "SeenIds",
    "SigningKey",
    "VerifiedDelivery",
    "Verifier",
    "VerifyKey",
    "ed25519_key_from_seed",
    "new_hmac_key",
    "parse_key",
    "parse_keys",
    "sign",
    "signed_content",
]
