"""Print the simulator's instructions per world, counted by valgrind's cachegrind.

Owns: the machine-independent cost figure of a simulated world (docs/design/simulator.md,
"Cost"). Two processes run under ``valgrind --tool=cachegrind``: one runs ten worlds to
warm up and then WORLDS worlds (seed 0, default profile, one process); the other runs
only the warm-up. The difference of their instruction counts over WORLDS is the cost of
one world. With ``PYTHONHASHSEED=0`` it repeats to the last digit on the same code.

Must not: judge the gates (``longcall sim`` does), or write anywhere but a temporary
directory.

Usage: python scripts/sim_instructions.py [WORLDS]   (150 unless given; needs valgrind)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WORLDS = 150
WARM_UP = 10
RUN = (
    "import sys; from longcall.sim import derive_seed, run_one\n"
    "warm, worlds = int(sys.argv[1]), int(sys.argv[2])\n"
    "for i in range(warm + worlds): run_one(derive_seed(0, i))\n"
)
TOTAL = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions(warm: int, worlds: int, scratch: Path) -> int:
    """Instructions of one process that runs ``warm`` then ``worlds`` worlds."""
    argv = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no",
        f"--cachegrind-out-file={scratch / 'out.%p'}",
        sys.executable, "-c", RUN, str(warm), str(worlds),
    ]  # fmt: skip
    done = subprocess.run(
        argv,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    found = TOTAL.findall(done.stderr)
    if not found:
        raise SystemExit(f"cachegrind printed no instruction count:\n{done.stderr[-2000:]}")
    return int(found[-1].replace(",", ""))


def main() -> int:
    worlds = int(sys.argv[1]) if len(sys.argv) > 1 else WORLDS
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed")
    with tempfile.TemporaryDirectory() as scratch:
        base = instructions(WARM_UP, 0, Path(scratch))
        full = instructions(WARM_UP, worlds, Path(scratch))
    per_world = (full - base) / worlds
    print(f"{per_world / 1e6:.2f} M instructions per world ({worlds} worlds, seed 0, default)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
