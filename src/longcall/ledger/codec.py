"""Record and receipt ⇄ JSON-able dicts, for every ledger backend and the CLI.

The whole ``toolOperation.v1`` record is stored as one JSON document beside the few
columns the ledger indexes; decoding is strict, so a row written by a newer schema or
damaged on disk is reported, not half-read.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from longcall.core import OperationRecord, ResultKind, ServerStatus, State, TerminalReceipt
from longcall.errors import CorruptRow

_TUPLE_FIELDS = {"input_keys_pending", "input_keys_answered", "warnings"}
_ENUM_FIELDS: dict[str, type[Any]] = {
    "state": State,
    "server_status": ServerStatus,
    "result_kind": ResultKind,
    "terminal_status": ServerStatus,
}


_MISSING = object()


def _compile(cls: type[Any]) -> tuple[Callable[[Any], dict[str, Any]], Callable[[Any], Any]]:
    """The encoder and decoder of ``cls``, generated once as one straight line per field.

    Both run for every ledger write and read (the CPU path of L4, and the simulator);
    a loop over the fields with a per-field type test costs two to three times as much.
    The encoder builds the dict in sorted key order, so the C JSON encoder needs no sort
    pass and the stored text is canonical (sorted keys, no spaces). The decoder writes
    the slots directly, as ``evolve`` does, filling a missing field with its default: a
    row written before the field existed still reads.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_MISSING": _MISSING}
    encode = ["def encode(value):", "    return {"]
    for name in sorted(fields):
        if name in _ENUM_FIELDS:
            item = f"None if value.{name} is None else value.{name}.value"
        elif name in _TUPLE_FIELDS:
            item = f"list(value.{name})"
        else:
            item = f"value.{name}"
        encode.append(f"        {name!r}: {item},")
    encode.append("    }")
    decode = ["def decode(data):", "    get = data.get", "    new = _new(_cls)"]
    for index, (name, field) in enumerate(fields.items()):
        namespace[f"_set{index}"] = cls.__dict__[name].__set__
        if field.default is not dataclasses.MISSING:
            namespace[f"_default{index}"] = field.default
            missing = f"_default{index}"
        else:
            missing = f"_required({name!r})"
        if name in _ENUM_FIELDS:
            namespace[f"_enum{index}"] = _ENUM_FIELDS[name]
            present = f"None if item is None else _enum{index}(item)"
        elif name in _TUPLE_FIELDS:
            present = "tuple(item)"
        else:
            present = "item"
        decode.append(f"    item = get({name!r}, _MISSING)")
        decode.append(f"    _set{index}(new, {missing} if item is _MISSING else {present})")
    decode.append("    return new")
    namespace["_required"] = _required
    exec("\n".join(encode + decode), namespace)  # the text names only the fields
    return namespace["encode"], namespace["decode"]


def _required(name: str) -> Any:
    raise TypeError(f"missing required field {name!r}")


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {
    cls: frozenset(f.name for f in dataclasses.fields(cls))
    for cls in (OperationRecord, TerminalReceipt)
}
_CODECS = {cls: _compile(cls) for cls in (OperationRecord, TerminalReceipt)}
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def to_dict(value: OperationRecord | TerminalReceipt) -> dict[str, Any]:
    """Plain JSON types: enums by value, tuples as lists; keys in sorted order."""
    return _CODECS[type(value)][0](value)


def _from_dict(cls: type[Any], data: dict[str, Any]) -> Any:
    if not _FIELD_NAMES[cls].issuperset(data):
        unknown = sorted(set(data).difference(_FIELD_NAMES[cls]))
        raise CorruptRow(f"{cls.__name__} row has unknown fields {unknown}")
    try:
        # A bad enum value, a non-list tuple field or a missing field is damage too,
        # not a ValueError or TypeError escaping from the middle of a read.
        return _CODECS[cls][1](data)
    except (TypeError, ValueError) as exc:
        raise CorruptRow(f"{cls.__name__} row does not decode: {exc}") from exc


def record_from_dict(data: dict[str, Any]) -> OperationRecord:
    record: OperationRecord = _from_dict(OperationRecord, data)
    return record


def receipt_from_dict(data: dict[str, Any]) -> TerminalReceipt:
    receipt: TerminalReceipt = _from_dict(TerminalReceipt, data)
    return receipt


def dumps(value: OperationRecord | TerminalReceipt) -> str:
    """Compact JSON with sorted keys (the keys arrive sorted: no sort pass)."""
    return _ENCODER.encode(to_dict(value))


def loads_record(text: str) -> OperationRecord:
    return record_from_dict(_loads_object(text, "record"))


def loads_receipt(text: str) -> TerminalReceipt:
    return receipt_from_dict(_loads_object(text, "receipt"))


def _loads_object(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorruptRow(f"{what} JSON is damaged: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptRow(f"{what} JSON is not an object")
    return data
