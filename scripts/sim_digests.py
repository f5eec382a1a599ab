"""Print one digest per simulator profile of everything 600 worlds did, and one of 600
host worlds (``longcall sim --world host``, default profile).

Owns: the check that a change kept every simulated world identical (the same draws,
events and ledger writes) or, when it changes behaviour, the new figures to record in
docs/design/simulator.md. Each world of seed 0 (permutations 0..N-1) is run with its
trace; the digest covers every trace line and every measured field of its result.

Must not: judge the gates (``longcall sim`` does), or write anywhere.

With ``--webhooks``, a last line digests the default profile's worlds run with
webhook deliveries (each with its poll-only twin): the channel's own replay check.

Usage: python scripts/sim_digests.py [WORLDS] [--webhooks]
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Callable
from typing import Any

from longcall.sim import derive_seed, run_one
from longcall.sim.config import PROFILES
from longcall.sim.hostworld import run_host
from longcall.sim.webhooks import run_webhooks

WORLDS = 600


def profile_digest(profile_name: str, worlds: int, *, webhooks: bool = False) -> str:
    """The first 16 hex digits of a SHA-256 over ``worlds`` worlds of one profile."""
    profile = PROFILES[profile_name]
    one = run_webhooks if webhooks else run_one
    return digest_of(lambda seed: one(seed, trace=True, profile=profile), worlds)


def host_digest(worlds: int) -> str:
    """The same over ``worlds`` host worlds of seed 0."""
    return digest_of(lambda seed: run_host(seed, trace=True), worlds)


def digest_of(run: Callable[[int], Any], worlds: int) -> str:
    """Every trace line and measured field of the worlds of seed 0, 0..worlds-1."""
    digest = hashlib.sha256()
    for index in range(worlds):
        result = run(derive_seed(0, index))
        digest.update("\n".join(result.trace or []).encode())
        fields = dataclasses.asdict(dataclasses.replace(result, trace=None))
        digest.update(repr(sorted(fields.items())).encode())
    return digest.hexdigest()[:16]


def main(argv: list[str]) -> None:
    webhooks = "--webhooks" in argv
    numbers = [arg for arg in argv[1:] if arg != "--webhooks"]
    worlds = int(numbers[0]) if numbers else WORLDS
    for name in PROFILES:
        print(f"{name}: {profile_digest(name, worlds)}")
    print(f"host: {host_digest(worlds)}")
    if webhooks:
        print(f"default webhooks: {profile_digest('default', worlds, webhooks=True)}")


if __name__ == "__main__":
    main(sys.argv)
