"""What ``-h`` and the simulator's summary print: examples a person can paste, and
counts whose nouns agree."""

from __future__ import annotations

import re

import click
from click.testing import CliRunner

from longcall.cli import main
from longcall.cli.common import plural


def every_command(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += every_command(command, (*path, name))
        else:
            found.append((*path, name))
    return found


def test_help_examples_have_no_runs_of_spaces() -> None:
    """An example line is one command as typed: no gap of spaces inside it (a line
    continued with a backslash shows the backslash), only before a # comment."""
    runner = CliRunner()
    bad: list[str] = []
    for path in every_command(main):
        shown = runner.invoke(main, [*path, "-h"], terminal_width=200).output
        for line in shown.splitlines():
            text = line.strip()
            if text.startswith("longcall ") and re.search(r"\S {3,}(?!#)\S", text):
                bad.append(f"{' '.join(path)}: {text}")
    assert bad == []


def test_counts_agree_with_their_nouns() -> None:
    """1 mutant, 2 mutants, 0 mutants."""
    assert [plural(n, "mutant") for n in (0, 1, 2)] == ["0 mutants", "1 mutant", "2 mutants"]
