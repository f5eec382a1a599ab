"""Where the ``longcall`` command starts: Ctrl-C while the command is still loading.

Owns: loading the command (:mod:`longcall.cli`, which takes a moment: the client, click,
rich) so that Ctrl-C before the command runs ends with one line and exit 130, never a
traceback. Nothing was recorded or sent by then. Must not: import anything at module
level (it runs before everything else, and so does the package it is in, which imports
nothing either).

What is left uncovered, because no code of the project runs yet: the interpreter's own
start (a SIGINT before it installs its handler ends the process silently; one while it
imports ``site`` ends in its "Fatal Python error"), and finding and loading this module
and its package (about a millisecond).
"""

import sys

INTERRUPTED = 130  # longcall.cli.common.ExitCode.INTERRUPTED, not imported: not loaded yet
BEFORE_THE_COMMAND = "interrupted before the command started: nothing was sent"
"""What Ctrl-C says while the command loads (the command's own group says it too)."""


def main() -> None:
    """Load and run the ``longcall`` command."""
    try:
        from longcall.cli import main as command
    except KeyboardInterrupt:
        sys.stderr.write(f"\nlongcall: {BEFORE_THE_COMMAND}\n")
        sys.exit(INTERRUPTED)
    command()
