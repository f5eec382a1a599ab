"""``python -m longcall.server``: the reference server without the top-level CLI.

Owns: argument parsing for process-level tests (restart) and the benchmark. Must not:
hold logic; it calls ``longcall.server.cli.run_reference_server``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from longcall.errors import LongcallError
from longcall.server.cli import run_reference_server, start_failure
from longcall.server.options import DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL

PROG = "python -m longcall.server"


def _whole_number(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argument type: a whole number within the bounds (a task limit of 0 would
    refuse every task; a port past 65535 names none)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be {minimum} to {maximum}, not {value}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more, not {value}")
        return value

    return parse


def main() -> None:
    """Parse ``--store --host --port [--drop-create-response-at N] [--metrics-port N]
    [--max-open-tasks N]`` and serve. A failure to start (a port taken, a store that
    cannot be opened) is one line on stderr and exit 1; Ctrl-C exits 130."""
    parser = argparse.ArgumentParser(prog=PROG)
    parser.add_argument("--store", default=None, help="task store URL (sqlite:///PATH)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=_whole_number(0, 65535), default=8765)
    parser.add_argument("--drop-create-response-at", type=_whole_number(1), default=None)
    parser.add_argument(
        "--metrics-port", type=_whole_number(0, 65535), default=None, help="0: any free port"
    )
    parser.add_argument(
        "--max-open-tasks",
        type=_whole_number(1),
        default=DEFAULT_MAX_OPEN_TASKS_PER_PRINCIPAL,
        help="tasks one caller may hold open at once",
    )
    args = parser.parse_args()
    try:
        run_reference_server(
            store_url=args.store,
            host=args.host,
            port=args.port,
            drop_create_response_at=args.drop_create_response_at,
            metrics_port=args.metrics_port,
            max_open_tasks=args.max_open_tasks,
        )
    except KeyboardInterrupt:
        sys.exit(130)
    except (LongcallError, OSError, UnicodeError) as exc:
        print(f"{PROG}: {start_failure(exc, args.host, args.port)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
