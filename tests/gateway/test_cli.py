"""`longcall gateway` on the command line: host entries, and refusals before serving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from longcall.cli import main


def entry(output: str) -> dict[str, object]:
    """The JSON after the comment line saying where the host keeps it."""
    comment, _, document = output.partition("\n")
    assert comment.startswith("// ")
    parsed: dict[str, object] = json.loads(document)
    return parsed


@pytest.mark.parametrize("host", ["claude-desktop", "cursor", "vscode"])
def test_host_config_prints_an_entry_that_starts_the_gateway_over_stdio(
    host: str, tmp_path: Path
) -> None:
    """Each host's entry runs `longcall gateway --stdio --servers <absolute path>`."""
    servers = tmp_path / "servers.toml"
    result = CliRunner().invoke(main, ["gateway", "--servers", str(servers), "--host-config", host])
    assert result.exit_code == 0, result.output
    document = entry(result.output)
    table = document["servers" if host == "vscode" else "mcpServers"]
    assert isinstance(table, dict)
    server = table["longcall"]
    assert server["args"] == ["gateway", "--stdio", "--servers", str(servers.resolve())]


def test_host_config_with_a_port_points_cursor_and_vscode_at_the_url(tmp_path: Path) -> None:
    """With --port, Cursor and VS Code reach a running gateway; a token is never written."""
    args = ["gateway", "--servers", str(tmp_path / "s.toml"), "--port", "8766"]
    cursor = entry(CliRunner().invoke(main, [*args, "--host-config", "cursor"]).output)
    assert cursor == {"mcpServers": {"longcall": {"url": "http://127.0.0.1:8766/mcp"}}}
    vscode = CliRunner().invoke(main, [*args, "--host-config", "vscode", "--token-env", "GW_TOKEN"])
    assert "${input:longcall-token}" in vscode.output
    claude = entry(CliRunner().invoke(main, [*args, "--host-config", "claude-desktop"]).output)
    assert "command" in claude["mcpServers"]["longcall"]  # type: ignore[index]


def test_no_upstreams_or_an_unset_token_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to serve, or --token-env naming an unset variable: exit 2 before serving."""
    monkeypatch.delenv("LONGCALL_SERVERS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    none = CliRunner().invoke(main, ["gateway", "--port", "0"])
    assert none.exit_code == 2
    assert "no upstream servers" in none.output
    servers = tmp_path / "servers.toml"
    servers.write_text('[servers.up]\nurl = "http://127.0.0.1:9/mcp"\n')
    monkeypatch.delenv("GW_UNSET", raising=False)
    unset = CliRunner().invoke(
        main, ["gateway", "--servers", str(servers), "--token-env", "GW_UNSET", "--port", "0"]
    )
    assert unset.exit_code == 2
    assert "GW_UNSET" in unset.output


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "gateway.example"])
def test_serving_off_loopback_without_a_token_is_a_usage_error(host: str, tmp_path: Path) -> None:
    """Off loopback without --token-env every caller would be one principal: exit 2, say why."""
    servers = tmp_path / "servers.toml"
    servers.write_text('[servers.up]\nurl = "http://127.0.0.1:9/mcp"\n')
    result = CliRunner().invoke(main, ["gateway", "--servers", str(servers), "--host", host])
    assert result.exit_code == 2
    assert "--token-env" in result.output
    assert "share one principal" in result.output


def test_host_config_refuses_a_ledger_url_holding_a_password(tmp_path: Path) -> None:
    """The entry would print and store the password: exit 2, pointing at PGPASSFILE."""
    url = "postgresql://gw:s3cret@127.0.0.1:5432/test"
    args = ["gateway", "--servers", str(tmp_path / "s.toml"), "--ledger", url]
    result = CliRunner().invoke(main, [*args, "--host-config", "cursor"])
    assert result.exit_code == 2
    assert "s3cret" not in result.output
    assert "PGPASSFILE" in result.output
