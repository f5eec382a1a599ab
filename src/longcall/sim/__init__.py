"""The deterministic simulator (SPEC F1–F3): the real executor, simulated everything else.

It owns the virtual clock, the seeded event queue, the simulated servers (both MCP
task versions, with their authoritative truth), the simulated network, fault
injection, the safety and liveness checks, and the gate report. It drives the real
:class:`~longcall.runtime.engine.Engine`, core and SQLite ledger and never reaches
into them: no fault is a flag inside ``core`` or ``runtime``. One
``random.Random(seed)`` is the only source of randomness, and there is no wall clock
in a run, so a seed replays a run byte for byte. It never imports ``longcall.cli``
or ``longcall.server``.
"""

from longcall.sim.report import Report, derive_seed, replay_command, run
from longcall.sim.world import FAULT_CLASSES, POLL_QPS_LIMIT, Result, World, run_one

__all__ = [
    "FAULT_CLASSES",
    "POLL_QPS_LIMIT",
    "Report",
    "Result",
    "World",
    "derive_seed",
    "replay_command",
    "run",
    "run_one",
]
