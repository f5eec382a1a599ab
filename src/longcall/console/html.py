"""HTML built from values, escaped unless the code itself made the markup.

Owns: :class:`Html` (markup this module or a page built) and :func:`el`, which makes
one element: every text child and every attribute value is escaped, only an
:class:`Html` child goes in as it is. Pages never format HTML from strings, so a status
message, a result or a question from a server can only ever be text (``<script>``
stays the characters ``<script>``). Must not: mark any outside string as ``Html``.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from urllib.parse import quote, urlencode

VOID = frozenset({"br", "input", "meta", "link", "img", "hr"})


class Html(str):
    """Markup made by code: inserted as it is."""

    __slots__ = ()


Child = str | int | float | Html | None | Iterable["Child"]


def esc(value: object) -> Html:
    """``value`` as text in HTML (quotes too, so it is safe in an attribute)."""
    return Html(html.escape(str(value), quote=True))


def join(children: Iterable[Child]) -> Html:
    """The children, each escaped unless it is :class:`Html`, one after the other."""
    return Html("".join(_render(child) for child in children))


def _render(child: Child) -> str:
    if child is None or child is False:
        return ""
    if isinstance(child, Html):
        return child
    if isinstance(child, str | int | float):
        return esc(child)
    return "".join(_render(c) for c in child)


def el(tag: str, *children: Child, **attrs: object) -> Html:
    """``<tag attrs>children</tag>``. Attribute names come from code (``class_`` →
    ``class``, ``data_live`` → ``data-live``); a value of True is a bare attribute,
    None or False leaves it out."""
    parts = [tag]
    for name, value in attrs.items():
        if value is None or value is False:
            continue
        key = name.rstrip("_").replace("_", "-")
        parts.append(key if value is True else f'{key}="{esc(value)}"')
    opening = f"<{' '.join(parts)}>"
    if tag in VOID:
        return Html(opening)
    return Html(f"{opening}{join(children)}</{tag}>")


def url(path: str, **params: object) -> str:
    """A link inside the console: ``path`` with the non-empty ``params`` as a query."""
    kept = {k: str(v) for k, v in params.items() if v not in (None, "")}
    return f"{path}?{urlencode(kept)}" if kept else path


def node_url(node: str, *, tail: str = "") -> str:
    """The page of one call node (its id quoted whole, slashes included)."""
    return f"/op/{quote(node, safe='')}{tail}"
