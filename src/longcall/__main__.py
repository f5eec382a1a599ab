"""``python -m longcall``: the same as the ``longcall`` command."""

from longcall.cli import main

main()
