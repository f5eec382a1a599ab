"""Print one digest of every result of the simulator's first N worlds per profile.

A change meant to make the product or the simulator cheaper must leave every world's
result as it was (the same draws, events and ledger writes): run this before and after
and compare the digests. ``python scripts/sim_digest.py [N]`` (600 by default); each
profile's digest is the SHA-256 of every result of its N worlds (seeds as
``longcall sim`` derives them from run seed 0), in order, with its trace if it kept one.
Must not: judge the results (``longcall sim`` does) or change the worlds it runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys

from longcall.sim.config import PROFILES
from longcall.sim.report import derive_seed, guarded
from longcall.sim.world import run_one


def profile_digest(name: str, worlds: int) -> str:
    """The digest of the first ``worlds`` results of profile ``name``."""
    profile = PROFILES[name]
    digest = hashlib.sha256()
    for index in range(worlds):
        seed = derive_seed(0, index)
        result = guarded(lambda s: run_one(s, profile=profile), seed)
        fields = dataclasses.asdict(result)
        digest.update(json.dumps(fields, sort_keys=True, default=repr).encode())
    return digest.hexdigest()


def main() -> int:
    worlds = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    for name in PROFILES:
        print(f"{name:<8} {worlds} worlds: {profile_digest(name, worlds)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
