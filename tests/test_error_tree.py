"""The error trees drawn in ``longcall.errors`` and ``longcall.server.errors`` are the real
ones: every exception longcall defines is under the one root, drawn under its real
parent, and nothing is drawn that does not exist."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys

import pytest

import longcall
from longcall import errors
from longcall.errors import LongcallError
from longcall.server import errors as server_errors
from longcall.server.errors import LongcallServerError

INTERNAL_SIGNALS = {
    # Raised and caught inside one module, never seen outside it: each is translated
    # where it is caught (into a core event, a refusal or a control-flow step).
    "longcall.adapters.aip151.mapping.ForeignOperation",
    "longcall.adapters.aip151.mapping.MalformedOperation",
    "longcall.adapters.sse.LineTooLong",
    "longcall.server.front._NotFinite",
    "longcall.server.webhooks.routes.ApiFailure",
    # A control-flow signal (a BaseException, like CancelledError): a tool that asks for
    # input leaves its body through it; the task manager catches it.
    "longcall.server.inputs.InputNeeded",
}


def _every_module() -> None:
    for module in pkgutil.walk_packages(longcall.__path__, "longcall."):
        if module.name.endswith("__main__") or module.name.startswith("longcall.integrations"):
            continue  # an entry point runs on import; integrations need optional extras
        importlib.import_module(module.name)


def _drawn(docstring: str, root: str) -> dict[str, str]:
    """``{class: parent}`` from a box drawing whose first line is ``root``."""
    lines = docstring.split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() == root)
    indent = len(lines[start]) - len(lines[start].lstrip())
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = [(-1, root)]
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        body = line[indent:]
        match = re.match(r"^([│ ]*)[├└]── (\w+)", body)
        if match is None:
            continue  # a continuation of the comment on the line above
        depth = len(match.group(1)) // 4
        while stack[-1][0] >= depth:
            stack.pop()
        parents[match.group(2)] = stack[-1][1]
        stack.append((depth, match.group(2)))
    return parents


def _real(root: type[BaseException], *, stop: type[BaseException] | None) -> dict[str, str]:
    parents: dict[str, str] = {}

    def walk(cls: type[BaseException]) -> None:
        for sub in cls.__subclasses__():
            if not sub.__module__.startswith("longcall"):
                continue  # a test's or a user's subclass
            parents[sub.__name__] = cls.__name__
            if sub is not stop:
                walk(sub)

    walk(root)
    return parents


def test_the_callers_tree_is_drawn_as_it_is() -> None:
    """Every subclass of ``LongcallError`` is drawn in ``longcall.errors`` under its
    real parent (the server's branch stops at its root), and nothing else is."""
    _every_module()
    assert errors.__doc__ is not None
    drawn = _drawn(errors.__doc__, "LongcallError")
    assert drawn == _real(LongcallError, stop=LongcallServerError)


def test_the_servers_branch_is_drawn_as_it_is() -> None:
    """Every subclass of ``LongcallServerError`` is drawn in ``longcall.server.errors``."""
    _every_module()
    assert server_errors.__doc__ is not None
    drawn = _drawn(server_errors.__doc__, "LongcallServerError")
    assert drawn == _real(LongcallServerError, stop=None)


def test_every_error_class_lives_in_one_of_the_two_modules() -> None:
    """An exception longcall defines is defined in ``longcall.errors`` or
    ``longcall.server.errors``, unless it is an internal signal named above."""
    _every_module()
    elsewhere = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("longcall") or name in ("longcall.errors", server_errors.__name__):
            continue
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and f"{name}.{attr}" not in INTERNAL_SIGNALS
            ):
                elsewhere.append(f"{name}.{attr}")
    assert elsewhere == []


@pytest.mark.parametrize("module", [errors, server_errors])
def test_every_defined_error_is_exported(module: object) -> None:
    """``__all__`` of ``longcall.errors`` names every error it defines (a handler can import
    any of them by name)."""
    defined = {
        name
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__  # type: ignore[attr-defined]
        and not name.startswith("_")
    }
    exported = set(getattr(module, "__all__", defined))
    assert defined <= exported


def test_the_package_exports_what_it_names_and_every_branch() -> None:
    """``longcall.__all__`` is exactly what ``longcall`` resolves, and every branch of
    the tree a handler catches (``UsageError``, ``ConflictError``, ...) is among it."""
    public = set(longcall.__all__)
    for name in public:
        assert getattr(longcall, name) is not None
    assert public == {*longcall._PUBLIC, "__version__"}
    branches = {
        cls.__name__ for cls in LongcallError.__subclasses__() if cls is not LongcallServerError
    }
    assert branches <= public
    assert "LongcallError" in public
