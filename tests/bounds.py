"""Bounds for the suite's waits: how long a test waits for something that will happen.

Owns: the one number every "wait for the event, bounded" in the suite may use when it has
no reason of its own. Must not: be used as a duration to sleep, or in an assertion about
how fast something is (those belong to ``make bench``).

A bound is only a guard against a hang: a test that meets it early costs nothing, and a
bound only a quiet machine meets fails the suite on a busy two-core CI machine running
several test workers, where a ``python -m longcall`` child alone can take seconds to
import. So bounds here are minutes, not seconds.
"""

from __future__ import annotations

LOADED_MACHINE_S = 120.0
"""A child process starts and answers, a worker claims, a state is reached."""
