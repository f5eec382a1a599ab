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


async def test_each_server_of_the_servers_file_has_its_own_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server with ``webhook = { secret_env = … }`` is taken at /webhooks/NAME with its
    key alone: another server's key is refused there, and without a default key the
    bare path takes nothing."""
    from longcall.adapters.servers import load_servers

    other = new_hmac_key(b"\x06" * 32)
    monkeypatch.delenv("LONGCALL_WEBHOOK_SECRET", raising=False)
    monkeypatch.setenv("A_HOOK_KEY", KEY.encoded())
    (tmp_path / "b.key").write_text(other.encoded() + "\n")
    toml = tmp_path / "servers.toml"
    toml.write_text(
        '[servers.a]\nurl = "http://a.example/mcp"\nwebhook = { secret_env = "A_HOOK_KEY" }\n'
        f'[servers.b]\nurl = "http://b.example/mcp"\n'
        f'webhook = {{ secret_file = "{tmp_path / "b.key"}" }}\n'
    )
    servers = load_servers(toml)
    as_json = tmp_path / "servers.json"
    as_json.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "a": {"url": "http://a.example/mcp", "webhook": {"secret_env": "A_HOOK_KEY"}}
                }
            }
        )
    )
    assert load_servers(as_json).servers["a"].webhook_keys() == KEY.encoded()
    async with Client(f"sqlite:///{tmp_path / 'l.db'}", servers=servers) as client:
        receiver = client.webhook_receiver()
        now = int(time.time())
        signed_a = sign([KEY], msg_id="evt_a", timestamp=now, body=BODY)
        signed_b = sign([other], msg_id="evt_b", timestamp=now, body=BODY)
        assert receiver.handle(signed_a, BODY, "a")[0] == 202
        assert receiver.handle(signed_b, BODY, "b")[0] == 202
        assert (
            receiver.handle(sign([KEY], msg_id="evt_c", timestamp=now, body=BODY), BODY, "b")[0]
            == 401
        )
        assert receiver.handle(signed_a, BODY, "nobody")[0] == 404
        assert receiver.handle(signed_a, BODY)[0] == 404  # no default key


def test_a_servers_file_webhook_entry_names_where_its_key_is_read(tmp_path: Path) -> None:
    """Exactly one of secret_env, secret_file; never a key written in the file."""
    from longcall.adapters.servers import load_servers
    from longcall.errors import ConfigError

    for table in (
        '{ secret = "whsec_AAAA" }',
        '{ secret_env = "A", secret_file = "b" }',
        "{ }",
        '"whsec_AAAA"',
    ):
        path = tmp_path / "servers.toml"
        path.write_text(f'[servers.a]\nurl = "http://a.example/mcp"\nwebhook = {table}\n')
        with pytest.raises(ConfigError, match="webhook"):
            load_servers(path)
