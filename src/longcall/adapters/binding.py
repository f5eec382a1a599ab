"""What a protocol mapping does with a tool's binding once it has one (X1, X6).

Owns: :func:`binding_of`, the binding a mapping made earlier in this process or one it
makes now (a restarted process has none, and its result fetch must still check the
output schema), :func:`schema_violation`, the check of a result value against the
output schema a tool declares, :func:`arguments_violation`, the check of a call's
arguments against the tool's input schema, and :func:`checked_validator`, the one
cache of checked
JSON Schemas (output schemas here, input forms in the runtime).

Must not: perform I/O (the binding is made by the mapping's own ``bind`` exchange), or
read protocol bodies.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema

from longcall.adapters.base import ToolBinding
from longcall.adapters.exchange import Exchange
from longcall.core.keys import canonical_json
from longcall.errors import AdapterError


def binding_of(
    bindings: Mapping[str, ToolBinding],
    bind: Callable[[str], Exchange[ToolBinding]],
    tool_name: str,
) -> Exchange[ToolBinding | None]:
    """The binding of ``tool_name`` in ``bindings``, made with ``bind`` on first use;
    None when the tool cannot be described (the result is then read without a schema)."""
    if tool_name not in bindings:
        try:
            yield from bind(tool_name)
        except AdapterError:
            return None
    return bindings.get(tool_name)


def schema_violation(value: Any, schema: Mapping[str, Any], *, subject: str) -> str | None:
    """Why ``value`` (named ``subject`` in the reason) breaks ``schema``, or None (X6)."""
    try:
        validator = checked_validator(canonical_json(schema))
    except jsonschema.exceptions.SchemaError as exc:
        return f"the tool's output schema is invalid: {exc.message}"
    except (ValueError, TypeError) as exc:  # not plain JSON (a NaN): no schema either
        return f"the tool's output schema is invalid: {exc}"
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "(root)"
    return f"{subject} violates the output schema at {where}: {error.message}"


def arguments_violation(arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` break the tool's input schema, or None: also None when the
    schema itself is broken, for then only the server can judge them."""
    try:
        validator = checked_validator(canonical_json(schema))
    except (jsonschema.exceptions.SchemaError, ValueError, TypeError):
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(dict(arguments)))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{'argument ' + repr(where) + ': ' if where else ''}{error.message}"


@functools.lru_cache(maxsize=256)
def checked_validator(schema_json: bytes) -> Any:
    """A validator for one schema (its canonical JSON), checked against its meta-schema
    once: that check costs tens of times a validation, and a server's schemas repeat
    with every result and form. Raises ``jsonschema.exceptions.SchemaError``."""
    schema = json.loads(schema_json)
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


__all__ = ["arguments_violation", "binding_of", "checked_validator", "schema_violation"]
