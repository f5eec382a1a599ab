"""The deterministic simulator (SPEC F1–F3): the real executor and mappings, simulated
servers and network.

It owns the virtual clock, the seeded event queue, the simulated servers (MCP both
task versions on the wire, AIP-151 and Apify-style, with their authoritative truth),
the simulated network, fault injection, the safety and liveness checks, the gate
report and the mutation tests of the real code. It drives the real
:class:`~longcall.runtime.engine.Engine`, core, SQLite ledger and protocol mappings and
never reaches into them: no fault is a flag inside ``core``, ``runtime`` or
``adapters`` (mutants are applied from :mod:`longcall.sim.mutants`, by replacing real
functions for one run). Its host world (``hostworld``) puts task-unaware hosts in front
of the gateway's real host-call decisions (``longcall.gateway.hostcalls``, pure), whose
upstream calls the same engine drives. One ``random.Random(seed)`` is the only source
of randomness, and there is no wall clock in a run, so a seed replays a run byte for
byte. It never imports ``longcall.cli``, ``longcall.server`` or the gateway's I/O.
"""

from longcall.sim.config import DEFAULT, PROFILES, Profile
from longcall.sim.report import Report, derive_seed, replay_command, run
from longcall.sim.world import FAULT_CLASSES, POLL_QPS_LIMIT, Result, World, run_one

__all__ = [
    "DEFAULT",
    "FAULT_CLASSES",
    "POLL_QPS_LIMIT",
    "PROFILES",
    "Profile",
    "Report",
    "Result",
    "World",
    "derive_seed",
    "replay_command",
    "run",
    "run_one",
]
