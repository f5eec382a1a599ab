"""Standard Webhooks signing and verification: interop with the reference library, v1a
vectors, every rejection typed, rotation, and the webhook-id dedup window."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
import standardwebhooks

from longcall.adapters.webhooks import (
    Ed25519VerifyKey,
    HmacKey,
    SeenIds,
    Verifier,
    ed25519_key_from_seed,
    new_hmac_key,
    parse_key,
    parse_keys,
    sign,
)
from longcall.errors import (
    InvalidWebhookKey,
    WebhookBadSignature,
    WebhookDuplicate,
    WebhookFromFuture,
    WebhookMalformed,
    WebhookRejected,
    WebhookStale,
)

NOW = 1_790_000_000
BODY = b'{"type":"task.status","data":{"taskId":"t-1","status":"completed"}}'
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()

# RFC 8032, section 7.1, TEST 1: an independent ed25519 vector (empty message).
RFC_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC_SIGNATURE = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)


def hmac_key(text: str = SECRET) -> HmacKey:
    key = parse_key(text)
    assert isinstance(key, HmacKey)
    return key


def signed(body: bytes = BODY, *, msg_id: str = "msg_1", at: int = NOW) -> dict[str, str]:
    return sign([hmac_key()], msg_id=msg_id, timestamp=at, body=body)


def test_longcall_signatures_verify_with_the_reference_library() -> None:
    """A delivery longcall signs verifies with standardwebhooks 1.1.0 (its clock: now)."""
    now = int(datetime.now(UTC).timestamp())
    headers = sign([hmac_key()], msg_id="msg_interop", timestamp=now, body=BODY)
    parsed = standardwebhooks.Webhook(SECRET).verify(BODY, headers)
    assert parsed["data"]["taskId"] == "t-1"


def test_reference_library_signatures_verify_with_longcall() -> None:
    """A signature the reference library makes verifies with longcall, at its timestamp."""
    at = datetime.fromtimestamp(NOW, UTC)
    signature = standardwebhooks.Webhook(SECRET).sign("msg_ref", at, BODY.decode())
    headers = {
        "webhook-id": "msg_ref",
        "webhook-timestamp": str(NOW),
        "webhook-signature": signature,
    }
    delivery = Verifier([hmac_key()]).verify(headers, BODY, now=NOW + 1)
    assert delivery.msg_id == "msg_ref"
    assert delivery.body == BODY


def test_reference_library_refuses_a_tampered_longcall_delivery() -> None:
    """The reference library refuses what longcall signed once the body changes."""
    now = int(datetime.now(UTC).timestamp())
    headers = sign([hmac_key()], msg_id="msg_x", timestamp=now, body=BODY)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(SECRET).verify(BODY + b" ", headers)


def test_rfc8032_vector_through_whsk_and_whpk_keys() -> None:
    """The RFC 8032 seed read as whsk_ derives the RFC public key and its signature verifies."""
    key = parse_key("whsk_" + base64.b64encode(RFC_SEED).decode())
    public = key.public_key()  # type: ignore[union-attr]
    assert public.encoded() == "whpk_" + base64.b64encode(RFC_PUBLIC).decode()
    assert key.sign(b"") == RFC_SIGNATURE  # type: ignore[union-attr]
    assert public.verifies(b"", RFC_SIGNATURE)
    assert not public.verifies(b"x", RFC_SIGNATURE)


def test_v1a_round_trip_with_a_fixed_key_and_a_tampered_copy_refused() -> None:
    """v1a: signed with whsk_, verified with the whpk_ alone; a tampered body is refused."""
    private = ed25519_key_from_seed(RFC_SEED)
    public = parse_key(private.public_key().encoded())
    assert isinstance(public, Ed25519VerifyKey)
    headers = sign([private], msg_id="msg_a", timestamp=NOW, body=BODY)
    assert headers["webhook-signature"].startswith("v1a,")
    assert Verifier([public]).verify(headers, BODY, now=NOW).msg_id == "msg_a"
    with pytest.raises(WebhookBadSignature):
        Verifier([public]).verify(headers, BODY.replace(b"t-1", b"t-2"), now=NOW)
    # A v1a signature is never checked against a v1 secret, nor the other way round.
    with pytest.raises(WebhookBadSignature):
        Verifier([hmac_key()]).verify(headers, BODY, now=NOW)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda h, b: (h, b + b"x"), WebhookBadSignature),
        (lambda h, b: ({**h, "webhook-id": "msg_2"}, b), WebhookBadSignature),
        (lambda h, b: ({**h, "webhook-timestamp": str(NOW + 1)}, b), WebhookBadSignature),
        (lambda h, b: ({k: v for k, v in h.items() if k != "webhook-id"}, b), WebhookMalformed),
        (lambda h, b: ({**h, "webhook-signature": "v1"}, b), WebhookMalformed),
        (lambda h, b: ({**h, "webhook-signature": "v1,@@@"}, b), WebhookMalformed),
        (lambda h, b: ({**h, "webhook-signature": "v9,AAAA"}, b), WebhookMalformed),
        (lambda h, b: ({**h, "webhook-signature": ""}, b), WebhookMalformed),
        (
            lambda h, b: ({**h, "webhook-signature": " ".join(["v1,AAAA"] * 17)}, b),
            WebhookMalformed,
        ),
        (lambda h, b: ({**h, "webhook-timestamp": "12.5"}, b), WebhookMalformed),
        (lambda h, b: ({**h, "webhook-timestamp": "-5"}, b), WebhookMalformed),
        (lambda h, b: ({**h, "webhook-timestamp": "١٢٣"}, b), WebhookMalformed),
        (lambda h, b: ({**h, "webhook-id": "a.b"}, b), WebhookMalformed),
        (lambda h, b: ({**h, "webhook-id": "x" * 257}, b), WebhookMalformed),
    ],
)
def test_every_tampered_or_malformed_delivery_is_a_typed_rejection(change, error) -> None:  # type: ignore[no-untyped-def]
    """Tampered body, id or timestamp, and each malformed header: its own typed error."""
    verifier = Verifier([hmac_key()])
    headers, body = change(signed(), BODY)
    with pytest.raises(error) as raised:
        verifier.verify(headers, body, now=NOW)
    assert isinstance(raised.value, WebhookRejected)
    assert 400 <= raised.value.status < 500
    assert len(verifier.seen) == 0  # nothing recorded from a refused delivery


def test_a_non_utf8_body_verifies_as_bytes() -> None:
    """The signature covers bytes: a body that is not UTF-8 is no crash (the library's is)."""
    body = b"\xff\xfe"
    assert Verifier([hmac_key()]).verify(signed(body), body, now=NOW).body == body


def test_stale_and_future_timestamps_against_the_clock_passed_in() -> None:
    """Outside the window either way is refused; the window's edges pass."""
    verifier = Verifier([hmac_key()], tolerance_s=60)
    with pytest.raises(WebhookStale):
        verifier.verify(signed(at=NOW - 61), BODY, now=NOW)
    with pytest.raises(WebhookFromFuture):
        verifier.verify(signed(at=NOW + 61), BODY, now=NOW)
    verifier.verify(signed(msg_id="edge_old", at=NOW - 60), BODY, now=NOW)
    verifier.verify(signed(msg_id="edge_new", at=NOW + 60), BODY, now=NOW)


def test_wrong_secret_is_refused() -> None:
    """A delivery signed with another secret is a bad signature."""
    other = new_hmac_key(b"\x07" * 32)
    headers = sign([other], msg_id="msg_1", timestamp=NOW, body=BODY)
    with pytest.raises(WebhookBadSignature):
        Verifier([hmac_key()]).verify(headers, BODY, now=NOW)


def test_duplicate_id_refused_within_the_window_and_taken_after_it() -> None:
    """The same webhook-id twice in the window is a duplicate; ids expire by the clock."""
    verifier = Verifier([hmac_key()], tolerance_s=60)
    verifier.verify(signed(), BODY, now=NOW)
    with pytest.raises(WebhookDuplicate):
        verifier.verify(signed(at=NOW + 10), BODY, now=NOW + 10)
    # Past twice the tolerance the id is forgotten (its old timestamps could not pass).
    verifier.verify(signed(at=NOW + 121), BODY, now=NOW + 121)


def test_a_forgery_cannot_burn_an_id() -> None:
    """An id seen only on a refused delivery is still taken when the real one comes."""
    verifier = Verifier([hmac_key()])
    forged = {**signed(), "webhook-signature": "v1," + base64.b64encode(b"\0" * 32).decode()}
    with pytest.raises(WebhookBadSignature):
        verifier.verify(forged, BODY, now=NOW)
    verifier.verify(signed(), BODY, now=NOW)


def test_rotation_old_and_new_keys_both_verify() -> None:
    """While rotating, deliveries signed by old, new or both verify against both keys."""
    old, new = hmac_key(), new_hmac_key(b"\x42" * 32)
    verifier = Verifier(parse_keys(f"{old.encoded()} {new.encoded()}"))
    for n, keys in enumerate([[old], [new], [old, new], [new, old]]):
        headers = sign(keys, msg_id=f"rot_{n}", timestamp=NOW, body=BODY)
        assert verifier.verify(headers, BODY, now=NOW).msg_id == f"rot_{n}"
    # The reference library, holding only the new key, takes the dual-signed delivery.
    now = int(datetime.now(UTC).timestamp())
    both = sign([old, new], msg_id="rot_ref", timestamp=now, body=BODY)
    standardwebhooks.Webhook(new.encoded()).verify(BODY, both)


def test_seen_ids_stay_bounded() -> None:
    """The id set never holds more than its bound; the oldest id goes first."""
    seen = SeenIds(window_s=300, max_ids=3)
    for n in range(5):
        assert seen.add(f"id{n}", now=NOW)
    assert len(seen) == 3
    assert not seen.add("id4", now=NOW)
    assert seen.add("id0", now=NOW)


@pytest.mark.parametrize(
    "text",
    ["", "secret", "whsec_", "whsec_@@", "whsec_" + base64.b64encode(b"short").decode(),
     "whsk_" + base64.b64encode(b"x" * 31).decode(), "whpk_" + base64.b64encode(b"x" * 33).decode(),
     "whsk_" + base64.b64encode(RFC_SEED + b"\0" * 32).decode()],
)  # fmt: skip
def test_unreadable_keys_are_typed_and_never_quoted(text: str) -> None:
    """A key that cannot be read is InvalidWebhookKey, whose message never holds the key."""
    with pytest.raises(InvalidWebhookKey) as raised:
        parse_keys(text)
    if len(text) > 6:
        assert text[6:] not in str(raised.value)
