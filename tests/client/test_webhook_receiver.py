"""``Client.webhook_receiver``: its key from the argument or the environment, typed
refusals without one, and the receiver answering through ``handle``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from longcall import Client
from longcall.adapters.webhooks import ed25519_key_from_seed, new_hmac_key, sign
from longcall.errors import InvalidWebhookKey, MissingCredential

pytestmark = pytest.mark.anyio

KEY = new_hmac_key(b"\x05" * 32)
BODY = json.dumps({"type": "task.status", "data": {"taskId": "t-1"}}).encode()


async def test_no_key_is_a_missing_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without webhook_secret or $LONGCALL_WEBHOOK_SECRET there is no receiver."""
    monkeypatch.delenv("LONGCALL_WEBHOOK_SECRET", raising=False)
    async with Client(f"sqlite:///{tmp_path / 'l.db'}") as client:
        with pytest.raises(MissingCredential, match="LONGCALL_WEBHOOK_SECRET"):
            client.webhook_receiver()


async def test_an_unreadable_key_is_refused(tmp_path: Path) -> None:
    """A key that is not whsec_/whsk_/whpk_ + base64 is InvalidWebhookKey."""
    async with Client(f"sqlite:///{tmp_path / 'l.db'}", webhook_secret="hunter2") as client:
        with pytest.raises(InvalidWebhookKey):
            client.webhook_receiver()


async def test_keys_from_the_environment_rotate_and_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two keys in the variable (a v1 secret and a v1a public key): both verify."""
    v1a = ed25519_key_from_seed(b"\x06" * 32)
    monkeypatch.setenv("LONGCALL_WEBHOOK_SECRET", f"{KEY.encoded()} {v1a.public_key().encoded()}")
    async with Client(f"sqlite:///{tmp_path / 'l.db'}") as client:
        receiver = client.webhook_receiver()
        now = int(time.time())
        assert receiver.handle(sign([KEY], msg_id="a", timestamp=now, body=BODY), BODY)[0] == 202
        assert receiver.handle(sign([v1a], msg_id="b", timestamp=now, body=BODY), BODY)[0] == 202
        other = new_hmac_key(b"\x07" * 32)
        wrong = sign([other], msg_id="c", timestamp=now, body=BODY)
        assert receiver.handle(wrong, BODY)[0] == 401
