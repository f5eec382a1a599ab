"""Fixed signed-header vectors for Standard Webhooks v1 and v1a: a known key, id,
timestamp and body give a known ``webhook-signature``, in both directions (signing
reproduces it; verifying accepts it, at the vector's own time)."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks import Webhook

from longcall.adapters.webhooks import (
    Ed25519SigningKey,
    HmacKey,
    Verifier,
    parse_key,
    sign,
    signed_content,
)
from longcall.errors import WebhookBadSignature

VECTORS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "fixtures" / "webhook_vectors.json").read_text()
)["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_signing_reproduces_the_vector(vector: dict[str, Any]) -> None:
    key = parse_key(vector["key"])
    assert isinstance(key, HmacKey | Ed25519SigningKey)
    headers = sign(
        [key], msg_id=vector["msg_id"], timestamp=vector["timestamp"], body=vector["body"].encode()
    )
    assert headers == {
        "webhook-id": vector["msg_id"],
        "webhook-timestamp": str(vector["timestamp"]),
        "webhook-signature": vector["signature"],
    }


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_verifying_accepts_the_vector_and_refuses_a_changed_one(vector: dict[str, Any]) -> None:
    verify_with = vector.get("public_key", vector["key"])
    headers = {
        "webhook-id": vector["msg_id"],
        "webhook-timestamp": str(vector["timestamp"]),
        "webhook-signature": vector["signature"],
    }
    body = vector["body"].encode()
    Verifier([parse_key(verify_with)]).verify(headers, body, now=vector["timestamp"])
    with pytest.raises(WebhookBadSignature):
        Verifier([parse_key(verify_with)]).verify(headers, body + b" ", now=vector["timestamp"])


def test_the_v1_vector_is_the_reference_librarys() -> None:
    """The reference library signs the v1 vector to the same header."""
    [v1] = [v for v in VECTORS if v["name"] == "v1"]
    at = datetime.datetime.fromtimestamp(v1["timestamp"], tz=datetime.UTC)
    assert Webhook(v1["key"]).sign(v1["msg_id"], at, v1["body"]) == v1["signature"]


def test_the_v1a_vector_verifies_with_plain_ed25519() -> None:
    """The v1a signature is ed25519 over ``id.timestamp.body`` by the whpk_ key: checked
    with the cryptography library directly, not through longcall's verifier."""
    [v1a] = [v for v in VECTORS if v["name"] == "v1a"]
    public = Ed25519PublicKey.from_public_bytes(
        base64.b64decode(v1a["public_key"].removeprefix("whpk_"))
    )
    signature = base64.b64decode(v1a["signature"].removeprefix("v1a,"))
    public.verify(signature, signed_content(v1a["msg_id"], v1a["timestamp"], v1a["body"].encode()))
