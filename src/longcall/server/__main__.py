"""``python -m longcall.server``: the reference server without the top-level CLI.

Owns: argument parsing for process-level tests (restart) and the benchmark. Must not:
hold logic; it calls ``longcall.server.cli.run_reference_server``.
"""

from __future__ import annotations

import argparse

from longcall.server.cli import run_reference_server
from longcall.server.options import DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL


def _at_least_one(text: str) -> int:
    """A count of 1 or more (0 would refuse every task)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def main() -> None:
    """Parse ``--store --host --port [--drop-create-response-at N] [--metrics-port N]
    [--max-open-tasks N]`` and serve."""
    parser = argparse.ArgumentParser(prog="python -m longcall.server")
    parser.add_argument("--store", default=None, help="task store URL (sqlite:///PATH)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--drop-create-response-at", type=int, default=None)
    parser.add_argument("--metrics-port", type=int, default=None, help="0: any free port")
    parser.add_argument(
        "--max-open-tasks",
        type=_at_least_one,
        default=DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL,
        help="tasks one caller may hold open at once",
    )
    args = parser.parse_args()
    run_reference_server(
        store_url=args.store,
        host=args.host,
        port=args.port,
        drop_create_response_at=args.drop_create_response_at,
        metrics_port=args.metrics_port,
        max_open_tasks=args.max_open_tasks,
    )


if __name__ == "__main__":
    main()
