"""``python -m longcall``: the same as the ``longcall`` command."""

from longcall.entry import main

main()
