"""Simulator speed (F1–F3): 10,000 permutations of the release run, against the
simulator as it was before it ran the real mappings, on this machine, now.

``longcall sim --permutations 10000`` must take at most 15 s on a 2-core machine, with
the real engine, core, protocol mappings and SQLite ledger code in the loop. The figure
is the wall time of ``run(10_000, seed=0)`` (two worker processes, as the command uses).

The "before" is the simulator of commit :data:`BEFORE_COMMIT` (a model of the mappings,
no wire), extracted from this repository's history and run in a child process on the
same machine right after, so both see the same load; when the history is not there,
the figure recorded when it was last measured is printed instead, said so. The machine
may be shared: the load average is printed with the figures.

This machine's speed moves a lot from one period to the next (the same "before" run
has taken 20 s in one and 53 s in another), so a wall time alone says little. The
benchmark also prints the figure scaled to the machine the aim was set on, where the
"before" took :data:`BEFORE_RECORDED_S`: ``now × BEFORE_RECORDED_S / before``. That is
the figure to compare with the aim from one run to the next.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PERMUTATIONS = int(os.environ.get("LONGCALL_BENCH_SIM_PERMUTATIONS", "10000"))
TARGET_S = 15.0
BEFORE_COMMIT = "7739ca1"
"""Main just before the simulator ran the real mappings."""
BEFORE_RECORDED_S = 36.0
"""10,000 permutations of the model-based simulator on a quiet 2-core machine."""
ROOT = Path(__file__).resolve().parent.parent
TIMED = (
    "import sys, time; from longcall.sim import run; t = time.perf_counter(); "
    "r = run(int(sys.argv[1]), seed=0, workers=2); "
    "print(time.perf_counter() - t, r.failed_permutations)"
)


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def timed_run(source: Path, permutations: int) -> tuple[float, int]:
    """Wall seconds of ``run(permutations)`` with the simulator under ``source``."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    out = subprocess.run(
        [sys.executable, "-c", TIMED, str(permutations)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=source,
    ).stdout.split()
    return float(out[0]), int(out[1])


def extract(commit: str, into: Path) -> Path | None:
    """``src/`` of ``commit`` under ``into``, or None without the history."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "src"],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def run() -> None:
    started = time.strftime("%Y-%m-%d %H:%M")
    print(f"{started}, load average {load()} (1, 5, 15 min) on {os.cpu_count()} cores")
    after, failed = timed_run(ROOT / "src", PERMUTATIONS)
    verdict = "meets" if after <= TARGET_S else "misses"
    print(
        f"now:    {PERMUTATIONS} permutations in {after:6.1f} s ({PERMUTATIONS / after:6.0f}/s,"
        f" {failed} failed): {verdict} the {TARGET_S:g} s target"
    )
    with tempfile.TemporaryDirectory(prefix="longcall-bench-sim-") as tmp:
        source = extract(BEFORE_COMMIT, Path(tmp))
        if source is None:
            print(f"before: {BEFORE_RECORDED_S:.1f} s recorded (no git history here to rerun it)")
            return
        before, _ = timed_run(source, PERMUTATIONS)
    print(
        f"before: {PERMUTATIONS} permutations in {before:6.1f} s ({PERMUTATIONS / before:6.0f}/s)"
        f" with the simulator of {BEFORE_COMMIT} (a model of the mappings), ratio"
        f" {before / after:.2f}; load average now {load()}"
    )
    scaled = after * BEFORE_RECORDED_S / before
    verdict = "meets" if scaled <= TARGET_S else "misses"
    print(
        f"scaled: {scaled:6.1f} s on the machine the aim was set on (where the before took"
        f" {BEFORE_RECORDED_S:g} s): {verdict} the {TARGET_S:g} s target"
    )


if __name__ == "__main__":
    run()
