"""Record and receipt ⇄ JSON-able dicts, for every ledger backend and the CLI.

The whole ``toolOperation.v1`` record is stored as one JSON document beside the few
columns the ledger indexes; decoding is strict, so a row written by a newer schema or
damaged on disk is reported, not half-read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any, NamedTuple

from longcall.core import (
    TERMINAL_STATES,
    OperationRecord,
    ResultKind,
    ServerStatus,
    State,
    TerminalReceipt,
)
from longcall.errors import CorruptRow

_TUPLE_FIELDS = {"input_keys_pending", "input_keys_answered", "warnings"}
_ENUM_FIELDS: dict[str, type[Any]] = {
    "state": State,
    "server_status": ServerStatus,
    "result_kind": ResultKind,
    "terminal_status": ServerStatus,
}


_MISSING = object()


_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)
_any = _ENCODER.encode
"""The JSON text of any one value: the fallback of every generated field encoder, so
the generated text equals this encoder's output whatever a field holds."""


def _strings(value: Any) -> str:
    """A tuple-of-strings field as a JSON array (the common case without the encoder)."""
    if value == ():
        return "[]"
    if value.__class__ is tuple and all(item.__class__ is str for item in value):
        return "[" + ",".join(map(encode_basestring_ascii, value)) + "]"
    return _any(list(value))


def _value_text(name: str, annotation: str, namespace: dict[str, Any], first: str) -> str:
    """One field's JSON text as an expression: the annotated type's fast path, and
    ``_any`` for anything else (a bool in an int field, a NaN…). ``first`` is how the
    expression first reads the value (``(v := value.name)``, or ``v`` once it is read);
    later reads use ``v``."""
    optional = annotation.endswith(" | None")
    base = annotation.removesuffix(" | None")
    if name in _ENUM_FIELDS:
        texts = {member: encode_basestring_ascii(member.value) for member in _ENUM_FIELDS[name]}
        texts[None] = "null"
        namespace[f"_texts_{name}"] = texts
        return f"(_texts_{name}.get({first}) or _any(v.value))"
    if name in _TUPLE_FIELDS:
        return f"_strings({first})"
    fast = {  # {v} is where the value is first read: in the condition, evaluated first
        "str": "_str(v) if {v}.__class__ is str",
        "int": "_int(v) if {v}.__class__ is int",
        "float": "_float(v) if {v}.__class__ is float and _finite(v)",
        "bool": "'true' if {v} is True else 'false' if v is False",
    }.get(base)
    if fast is None:
        return f"_any({first})"
    if optional:
        return f"('null' if {first} is None else {fast.format(v='v')} else _any(v))"
    return f"({fast.format(v=first)} else _any(v))"


class _Codec(NamedTuple):
    to_dict: Callable[[Any], dict[str, Any]]
    parts: Callable[[Any], list[str]]
    parts_after: Callable[[Any, Any, list[str]], list[str]]
    decode: Callable[[dict[str, Any]], Any]


def _compile(cls: type[Any]) -> _Codec:
    """The codec of ``cls``, generated once as one straight line per field.

    It runs for every ledger write and read (the CPU path of L4, and the simulator);
    a loop over the fields with a per-field type test costs two to three times as much.
    ``to_dict`` builds the dict in sorted key order; ``parts`` writes the same JSON text
    as the json module would for that dict (sorted keys, no spaces) as a list to join,
    the key texts at even places and each field's value text after its key, by the
    annotated type's fast path; ``parts_after`` is ``parts`` made from another value's
    parts, encoding only the fields whose value is not the same object (see
    :class:`RecordTexts`); ``decode`` writes the slots directly, as ``evolve`` does,
    filling a missing field with its default: a row written before the field existed
    still reads.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    namespace: dict[str, Any] = {
        "_new": object.__new__,
        "_cls": cls,
        "_MISSING": _MISSING,
        "_any": _any,
        "_strings": _strings,
        "_str": encode_basestring_ascii,
        "_int": int.__repr__,
        "_float": float.__repr__,
        "_finite": math.isfinite,
    }
    encode = ["def encode(value):", "    return {"]
    parts = ["def parts(value):", "    return ["]
    after = ["def parts_after(value, base, base_parts):", "    out = base_parts.copy()"]
    for index, name in enumerate(sorted(fields)):
        if name in _ENUM_FIELDS:
            item = f"None if value.{name} is None else value.{name}.value"
        elif name in _TUPLE_FIELDS:
            item = f"list(value.{name})"
        else:
            item = f"value.{name}"
        encode.append(f"        {name!r}: {item},")
        key = ("{" if index == 0 else ",") + encode_basestring_ascii(name) + ":"
        annotation = str(fields[name].type)
        read = f"(v := value.{name})"
        parts.append(f"        {key!r}, {_value_text(name, annotation, namespace, read)},")
        after.append(f"    if {read} is not base.{name}:")
        again = _value_text(name, annotation, namespace, "v")
        after.append(f"        out[{2 * index + 1}] = {again}")
    encode.append("    }")
    parts.append("        '}',")
    parts.append("    ]")
    after.append("    return out")
    # decode fills a draft (the same slots, plain writes, like core.record's evolve)
    # that becomes ``cls`` by class assignment once every field is in.
    namespace["_Draft"] = type(f"_{cls.__name__}Draft", (), {"__slots__": cls.__slots__})
    decode = ["def decode(data):", "    get = data.get", "    new = _new(_Draft)"]
    for index, (name, field) in enumerate(fields.items()):
        if field.default is not dataclasses.MISSING:
            namespace[f"_default{index}"] = field.default
            missing = f"_default{index}"
        elif field.default_factory is not dataclasses.MISSING:
            namespace[f"_factory{index}"] = field.default_factory
            missing = f"_factory{index}()"
        else:
            missing = f"_required({name!r})"
        if name in _ENUM_FIELDS:
            # A member by its value from the enum's own map (a text that names no
            # member, or anything else, goes through the enum's call and its error).
            namespace[f"_enum{index}"] = _ENUM_FIELDS[name]
            namespace[f"_members{index}"] = _ENUM_FIELDS[name]._value2member_map_
            present = (
                f"None if item is None else (item.__class__ is str and _members{index}.get(item))"
                f" or _enum{index}(item)"
            )
        elif name in _TUPLE_FIELDS:
            present = "tuple(item)"
        else:
            present = "item"
        decode.append(f"    item = get({name!r}, _MISSING)")
        decode.append(f"    new.{name} = {missing} if item is _MISSING else {present}")
    decode.append("    new.__class__ = _cls")
    decode.append("    return new")
    namespace["_required"] = _required
    exec("\n".join(encode + parts + after + decode), namespace)  # it names only the fields
    return _Codec(
        namespace["encode"], namespace["parts"], namespace["parts_after"], namespace["decode"]
    )


def _required(name: str) -> Any:
    raise TypeError(f"missing required field {name!r}")


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {
    cls: frozenset(f.name for f in dataclasses.fields(cls))
    for cls in (OperationRecord, TerminalReceipt)
}
_CODECS = {cls: _compile(cls) for cls in (OperationRecord, TerminalReceipt)}


def to_dict(value: OperationRecord | TerminalReceipt) -> dict[str, Any]:
    """Plain JSON types: enums by value, tuples as lists; keys in sorted order."""
    return _CODECS[type(value)].to_dict(value)


def _from_dict(cls: type[Any], data: dict[str, Any]) -> Any:
    if not _FIELD_NAMES[cls].issuperset(data):
        unknown = sorted(set(data).difference(_FIELD_NAMES[cls]))
        raise CorruptRow(f"{cls.__name__} row has unknown fields {unknown}")
    try:
        # A bad enum value, a non-list tuple field or a missing field is damage too,
        # not a ValueError or TypeError escaping from the middle of a read.
        return _CODECS[cls].decode(data)
    except (TypeError, ValueError) as exc:
        raise CorruptRow(f"{cls.__name__} row does not decode: {exc}") from exc


def record_from_dict(data: dict[str, Any]) -> OperationRecord:
    record: OperationRecord = _from_dict(OperationRecord, data)
    return record


def receipt_from_dict(data: dict[str, Any]) -> TerminalReceipt:
    receipt: TerminalReceipt = _from_dict(TerminalReceipt, data)
    return receipt


def dumps(value: OperationRecord | TerminalReceipt) -> str:
    """Compact JSON with sorted keys: exactly ``json.dumps(to_dict(value),
    sort_keys=True, separators=(",", ":"))``, written field by field."""
    return "".join(_CODECS[type(value)].parts(value))


class RecordTexts:
    """The JSON text of the records one ledger writes, each made from the last text it
    made for the same call node: only the fields that hold another object than that
    record's are encoded again, the rest of its text is reused.

    A write changes a few fields of a record of about sixty and ``evolve`` carries the
    others over as the same objects, so this encodes a few instead of all (the ledger's
    largest cost of Python per write, L4). The text equals :func:`dumps`'s whatever base
    is found: every field holds an immutable value (texts, numbers, enum members, tuples
    of texts), and the same object always encodes the same. The last text of at most
    ``keep`` call nodes is held; a terminal record's is let go (nothing writes it again
    but an operator), and the longest unwritten one goes first when the limit is met.
    Safe to share between threads: an entry is one (record, parts) pair, replaced whole.
    """

    __slots__ = ("_keep", "_last")

    def __init__(self, *, keep: int = 2048) -> None:
        self._keep = keep
        self._last: dict[str, tuple[OperationRecord, list[str]]] = {}

    def last(self, call_node_id: str) -> OperationRecord | None:
        """The record whose text was last made for ``call_node_id``, if held: a hint of
        what is stored (its write may have been refused since, or another writer's
        followed)."""
        last = self._last.get(call_node_id)
        return None if last is None else last[0]

    def dumps(self, record: OperationRecord) -> str:
        node = record.call_node_id
        last = self._last.pop(node, None)
        codec = _CODECS[OperationRecord]
        parts = codec.parts(record) if last is None else codec.parts_after(record, *last)
        if record.state not in TERMINAL_STATES:
            if len(self._last) >= self._keep:
                self._forget_oldest()
            self._last[node] = (record, parts)
        return "".join(parts)

    def _forget_oldest(self) -> None:
        # Another thread may change the dict between taking the first key and removing
        # it: then that thread made room, or will.
        with contextlib.suppress(StopIteration, RuntimeError, KeyError):
            del self._last[next(iter(self._last))]


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
