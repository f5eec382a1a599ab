"""Where the ``longcall`` command starts: Ctrl-C while the command is still loading.

Owns: loading the command (:mod:`longcall.cli`, which takes a moment: the client, click,
rich) so that Ctrl-C before the command runs ends with one line and exit 130, never a
traceback. Nothing was recorded or sent by then. Must not: import anything heavy at
module level (it runs before everything else).
"""

from __future__ import annotations

import sys

INTERRUPTED = 130  # longcall.cli.common.ExitCode.INTERRUPTED, not imported: not loaded yet


def main() -> None:
    """Load and run the ``longcall`` command."""
    try:
        from longcall.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write("\nlongcall: interrupted before the command started: nothing was sent\n")
        sys.exit(INTERRUPTED)
    command()
