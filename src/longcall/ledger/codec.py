"""Record and receipt ⇄ JSON-able dicts, for every ledger backend and the CLI.

The whole ``toolOperation.v1`` record is stored as one JSON document beside the few
columns the ledger indexes; decoding is strict, so a row written by a newer schema or
damaged on disk is reported, not half-read.
"""

from __future__ import annotations

import dataclasses
import json
import operator
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


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls))
    for cls in (OperationRecord, TerminalReceipt)
}


# Fields in sorted order, read at once: the stored JSON has sorted keys, and building the
# dict already sorted lets the C encoder skip sorting (the ledger's hot path, L4).
_SORTED_NAMES: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(sorted(names)) for cls, names in _FIELD_NAMES.items()
}
_GET_SORTED: dict[type[Any], operator.attrgetter[Any]] = {
    cls: operator.attrgetter(*names) for cls, names in _SORTED_NAMES.items()
}
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def to_dict(value: OperationRecord | TerminalReceipt) -> dict[str, Any]:
    """Plain JSON types: enums by value, tuples as lists; keys in sorted order."""
    cls = type(value)
    out = dict(zip(_SORTED_NAMES[cls], _GET_SORTED[cls](value), strict=True))
    for name in _ENUM_FIELDS.keys() & out.keys():
        if out[name] is not None:
            out[name] = out[name].value
    for name in _TUPLE_FIELDS & out.keys():
        out[name] = list(out[name])
    return out


def _from_dict(cls: type[Any], data: dict[str, Any]) -> Any:
    unknown = set(data).difference(_FIELD_NAMES[cls])
    if unknown:
        raise CorruptRow(f"{cls.__name__} row has unknown fields {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    try:
        # A bad enum value or a non-list tuple field is damage too, not a ValueError
        # or TypeError escaping from the middle of a read.
        for name, item in data.items():
            if name in _ENUM_FIELDS and item is not None:
                item = _ENUM_FIELDS[name](item)
            elif name in _TUPLE_FIELDS:
                item = tuple(item)
            kwargs[name] = item
        return cls(**kwargs)
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
