"""Mutation tests of the real code: every planted bug is caught by the CI seed corpus,
each applied by replacing a real function of core, runtime, adapters or the ledger."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from longcall.adapters.mcp import modern
from longcall.cli import main
from longcall.core import events as e
from longcall.core import machine
from longcall.errors import UnknownMutant
from longcall.sim.mutants import MUTANTS, applied, catch_table, mutant

REQUIRED = {
    "poll-floor-removed",
    "jitter-removed",
    "retry-after-ignored",
    "non-idempotent-create-resent",
    "lookup-skipped",
    "fresh-key-after-crash",
    "accept-before-fetch",
    "cancel-ack-is-cancelled",
    "refused-cancel-is-cancelled",
    "cancel-generation-ignored",
    "stale-epoch-accepted",
    "is-error-is-failed",
    "null-id-error-is-outcome",
    "truncated-result-accepted",
    "foreign-result-accepted",
    "stale-round-answered",
}
"""The mutants the simulator must catch (at least these)."""


def test_the_catalogue_has_every_required_mutant_and_each_targets_real_code() -> None:
    """Every required mutant is there; each replaces functions of the product itself."""
    assert {m.name for m in MUTANTS} >= REQUIRED
    for planted in MUTANTS:
        assert planted.patches
        for module_path, _attribute, _make in planted.patches:
            assert module_path.split(".")[1] in ("core", "runtime", "adapters", "ledger", "gateway")


def test_every_mutant_is_caught_by_the_ci_corpus() -> None:
    """Run the CI corpus under each mutant: some gate or check catches every one."""
    catches = catch_table(workers=2)
    survivors = [c.mutant for c in catches if not c.caught]
    assert survivors == []
    assert {c.mutant for c in catches} == {m.name for m in MUTANTS}


def test_a_mutant_is_undone_after_its_run_even_when_it_raises() -> None:
    """The real functions are back after the block, whatever happened in it."""
    original_lookup = modern.ModernMapping.lookup
    original_handler = machine._HANDLERS[e.SubmitOutcomeLost]
    seen: list[object] = []

    def planted_then_raise() -> None:
        with applied(mutant("lookup-skipped")):
            seen.append(modern.ModernMapping.lookup)
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError):
        planted_then_raise()
    assert seen[0] is not original_lookup
    assert modern.ModernMapping.lookup is original_lookup
    with applied(mutant("non-idempotent-create-resent")):
        assert machine._HANDLERS[e.SubmitOutcomeLost] is not original_handler
    assert machine._HANDLERS[e.SubmitOutcomeLost] is original_handler


def test_an_unknown_mutant_is_a_typed_error() -> None:
    """Asking for a mutant that is not catalogued raises, naming the known ones."""
    with pytest.raises(UnknownMutant, match="poll-floor-removed"):
        mutant("no-such-bug")


def test_cli_prints_the_catch_table() -> None:
    """`longcall sim --mutant NAME` prints which check caught it and exits 0."""
    result = CliRunner().invoke(main, ["sim", "--mutant", "accept-before-fetch"])
    assert result.exit_code == 0, result.output
    assert "accepted without fetching" in result.output
    assert "every mutant is caught" in result.output
