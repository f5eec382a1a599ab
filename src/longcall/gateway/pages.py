"""Results in pages, and the warning a success with nothing in it carries (G1).

Owns: cutting an upstream ``CallToolResult`` into pages of at most ``page_chars``
characters of model-visible text (about 8k tokens by default, at four characters a
token), and telling a success that holds zero items. A result that fits is one page and
is passed on untouched (the host sees what the upstream said); a larger one becomes text
pages (its text content, or its structured content as JSON when it has no text), each
saying ``page``/``pages``. Must not: read the ledger or know handles' format.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

CHARS_PER_TOKEN = 4
DEFAULT_PAGE_TOKENS = 8_000
DEFAULT_PAGE_CHARS = DEFAULT_PAGE_TOKENS * CHARS_PER_TOKEN
ZERO_ITEMS_WARNING = (
    "Warning: the call succeeded but returned zero items. Nothing was lost in transit:"
    " the tool itself found nothing."
)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def visible_text(result: Mapping[str, Any]) -> str:
    """What a model reads of a result: its text blocks, else its structured content."""
    texts = [
        str(block.get("text", ""))
        for block in result.get("content") or []
        if isinstance(block, Mapping) and block.get("type") == "text"
    ]
    if texts:
        return "\n".join(texts)
    if "structuredContent" in result:
        return _json(result["structuredContent"])
    return _json(result.get("content") or [])


def page_count(result: Mapping[str, Any], page_chars: int) -> int:
    """How many pages the result takes (1 when it fits whole)."""
    if len(_json(result)) <= page_chars:
        return 1
    text = visible_text(result)
    return max(1, -(-len(text) // page_chars))


def page_of(result: Mapping[str, Any], page: int, page_chars: int) -> dict[str, Any]:
    """Page ``page`` (from 1) of the result: the result itself when it fits whole."""
    pages = page_count(result, page_chars)
    if not 1 <= page <= pages:
        raise ValueError(f"page {page} does not exist: the result has {pages} page(s)")
    if pages == 1:
        return dict(result)
    text = visible_text(result)
    chunk = text[(page - 1) * page_chars : page * page_chars]
    return {"content": [{"type": "text", "text": chunk}], "isError": bool(result.get("isError"))}


def _empty(value: Any) -> bool:
    if value is None or value == "" or value == [] or value == {}:
        return True
    if isinstance(value, Mapping):
        lists = [v for v in value.values() if isinstance(v, list)]
        # {"items": [], "total": 0}: every collection in it is empty.
        return (
            bool(lists)
            and all(not v for v in lists)
            and all(isinstance(v, list) or v in (0, None, "") for v in value.values())
        )
    return False


def zero_items(result: Mapping[str, Any]) -> bool:
    """A success that holds nothing: no content, or only empty collections or text."""
    if result.get("isError"):
        return False
    if "structuredContent" in result:
        return _empty(result["structuredContent"])
    blocks = [b for b in result.get("content") or [] if isinstance(b, Mapping)]
    if not blocks:
        return True
    if any(b.get("type") != "text" for b in blocks):
        return False
    text = "".join(str(b.get("text", "")) for b in blocks).strip()
    if not text:
        return True
    try:
        return _empty(json.loads(text))
    except ValueError:
        return False
