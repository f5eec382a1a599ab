"""Run every benchmark module (``bench/bench_*.py``) in one process, in name order.

Each module exposes ``run() -> None`` and prints its measured figure, its baseline
measured in the same process, and their ratio (the targets live in the modules).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import bench


def main() -> int:
    names = sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_")
    )
    only = set(sys.argv[1:])
    for name in names:
        if only and name not in only:
            continue
        print(f"== {name}", flush=True)
        importlib.import_module(f"bench.{name}").run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
