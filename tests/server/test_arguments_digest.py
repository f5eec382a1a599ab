"""The server's digest of call arguments is the one canonical encoding of ``core.keys``:
the digests stores already hold stay the same, and NaN is refused, not encoded."""

from __future__ import annotations

import hashlib
import json

import pytest

from longcall.server.tools import arguments_digest


def test_the_digest_is_unchanged_for_what_stores_already_hold() -> None:
    """Sorted keys, no spaces, UTF-8 as it is: the hex SHA-256 a store compares."""
    arguments = {"b": [1, 2.5, None], "a": "é ü", "c": {"z": True, "y": "x"}}
    written = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert arguments_digest(arguments) == hashlib.sha256(written.encode()).hexdigest()


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_a_number_json_cannot_hold_is_refused(number: float) -> None:
    """NaN and the infinities have no JSON form: no digest is made of them."""
    with pytest.raises(ValueError):
        arguments_digest({"x": number})
