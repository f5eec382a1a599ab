"""Handles, pages and names: the gateway's pure rules, checked exhaustively where they
can be."""

from __future__ import annotations

import itertools

import pytest

from longcall.errors import HandleRefused
from longcall.gateway.handles import (
    ALPHABET,
    HostCall,
    format_handle,
    handle_for,
    node_for,
    owned_by,
    parse_handle,
)
from longcall.gateway.pages import page_count, page_of, zero_items
from longcall.gateway.upstreams import name_tools

KEY = b"ledger secret"


def handles(count: int) -> list[str]:
    calls = (HostCall(principal="p", tool="t", arguments_digest=str(i)) for i in range(count))
    return [handle_for(KEY, call, 0) for call in calls]


def body_of(handle: str) -> str:
    return handle.replace("-", "")[2:]


def shown(body: str) -> str:
    return f"lc-{body[:4]}-{body[4:]}"


def test_a_handle_is_short_and_reads_back_as_itself() -> None:
    """lc-xxxx-xxxxx, 13 characters; parsing forgives case and blanks only."""
    for handle in handles(50):
        assert len(handle) == 13
        assert parse_handle(handle) == handle
        assert parse_handle(f"  {handle.upper()} ") == handle


def test_every_single_character_change_is_refused() -> None:
    """Each position, each other character of the alphabet: the check character catches it."""
    for handle in handles(40):
        body = body_of(handle)
        for i, other in itertools.product(range(len(body)), ALPHABET):
            if other != body[i]:
                with pytest.raises(HandleRefused):
                    parse_handle(shown(body[:i] + other + body[i + 1 :]))


def test_every_swap_of_two_neighbours_is_refused() -> None:
    """Damm's quasigroup is totally anti-symmetric: no adjacent transposition passes."""
    for handle in handles(300):
        body = body_of(handle)
        for i in range(len(body) - 1):
            swapped = body[:i] + body[i + 1] + body[i] + body[i + 2 :]
            if swapped != body:
                with pytest.raises(HandleRefused):
                    parse_handle(shown(swapped))


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("lc-7k2m-9qx4", "cut short"),
        ("lc-7k2m9qx4tt", "too long"),
        ("lc-7k2m-9qxlt", "never use"),
        ("task-1234", "lc-7k2m-9qx4t"),
        ("", "a string"),
        (None, "a string"),
    ],
)
def test_a_malformed_handle_is_refused_with_its_reason(bad: object, reason: str) -> None:
    """Truncated, overlong, look-alike letters, another id, nothing: each says why."""
    with pytest.raises(HandleRefused, match=reason):
        parse_handle(bad)


def test_a_handle_names_a_node_only_for_its_principal() -> None:
    """The same handle under two principals names two nodes."""
    handle = format_handle("7k2m9qx4")
    assert node_for("alice", handle) != node_for("bob", handle)
    assert owned_by(node_for("alice", handle), "alice")
    assert not owned_by(node_for("alice", handle), "bob")


def test_repeats_and_arguments_give_different_handles() -> None:
    """The repeat counter and every argument digest lead to their own handle."""
    call = HostCall(principal="p", tool="t", arguments_digest="d")
    assert handle_for(KEY, call, 0) == handle_for(KEY, call, 0)
    assert len({handle_for(KEY, call, n) for n in range(100)}) == 100
    assert handle_for(b"another ledger", call, 0) != handle_for(KEY, call, 0)


def test_pages_cover_the_text_exactly_and_a_small_result_is_untouched() -> None:
    """Pages concatenate to the whole text; a result that fits is passed on as is."""
    text = "".join(chr(97 + i % 26) for i in range(2_345))
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    pages = page_count(result, 500)
    assert pages == 5
    assert "".join(page_of(result, p, 500)["content"][0]["text"] for p in range(1, 6)) == text
    small = {"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}}
    assert page_of(small, 1, 500) == small
    with pytest.raises(ValueError, match="has 5 page"):
        page_of(result, 6, 500)


@pytest.mark.parametrize(
    ("result", "empty"),
    [
        ({"content": [], "isError": False}, True),
        ({"content": [{"type": "text", "text": "[]"}]}, True),
        ({"content": [{"type": "text", "text": "  "}]}, True),
        ({"structuredContent": {"items": [], "total": 0}}, True),
        ({"structuredContent": {"items": [1]}}, False),
        ({"structuredContent": {"total": 0}}, False),
        ({"content": [{"type": "text", "text": "0 rows"}]}, False),
        ({"content": [], "isError": True}, False),
        ({"content": [{"type": "image", "data": "", "mimeType": "image/png"}]}, False),
    ],
)
def test_zero_items_are_told_from_small_results(result: dict[str, object], empty: bool) -> None:
    """Nothing at all, empty text or collections: zero items; anything else is not."""
    assert zero_items(result) is empty


def test_a_tool_keeps_its_name_unless_two_upstreams_or_a_gateway_tool_share_it() -> None:
    """Unique names stay; shared ones get the server's name as a prefix."""
    listed = {
        "a b": ("http://a/mcp", None, [{"name": "report"}, {"name": "only_a"}]),
        "b": ("http://b/mcp", None, [{"name": "report"}, {"name": "longcall_status"}]),
    }
    names = {(t.server, t.name): t.exposed for t in name_tools(listed, ["longcall_status"])}
    assert names == {
        ("a b", "report"): "a_b__report",
        ("a b", "only_a"): "only_a",
        ("b", "report"): "b__report",
        ("b", "longcall_status"): "b__longcall_status",
    }
