"""The simulator's own input: bad values get a one-line error and a non-zero exit."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from longcall.cli import main
from longcall.sim import run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--permutations", "0"], "--permutations: 0 is below 1"),
        (["--permutations", "-5"], "--permutations: -5 is below 1"),
        (["--permutations", "many"], "--permutations: 'many' is not a whole number"),
        (["--seed", "abc"], "--seed: 'abc' is not a whole number"),
        (["--seed", "-1"], "--seed: -1 is below 0"),
        (["--replay", "1.5"], "--replay: '1.5' is not a whole number"),
        (["--profile", "wild"], "--profile: unknown profile 'wild'"),
        (["--mutant", "no-such-bug"], "--mutant: unknown mutant 'no-such-bug'"),
        (["--mutants", "--webhooks"], "--mutants does not take --webhooks"),
    ],
)
def test_bad_input_is_one_clear_line_and_a_failure(args: list[str], message: str) -> None:
    """Each bad value names its option in one line and exits non-zero, running nothing."""
    result = CliRunner().invoke(main, ["sim", *args])
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert message in lines[0]


def test_zero_permutations_is_refused_by_the_api_too() -> None:
    """`run(0)` raises instead of reporting a vacuous pass."""
    with pytest.raises(ValueError, match="positive"):
        run(0)
