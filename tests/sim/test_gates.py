"""The release gates hold on a fixed seed corpus (SPEC F3; what CI runs)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from longcall.cli import main
from longcall.sim import FAULT_CLASSES, run

CI_PERMUTATIONS = 1000


def test_fixed_seed_corpus_holds_every_gate() -> None:
    """1,000 permutations of seed 0: every gate and every per-step check holds."""
    report = run(CI_PERMUTATIONS, seed=0, workers=1)
    assert report.failures == []
    assert report.gates() == dict.fromkeys(report.gates(), True)
    assert report.terminal_divergence == 0
    assert report.duplicate_operations == 0
    assert report.receipts_per_node_max == 1
    assert report.traceability == 1.0
    # Every fault class of F1 was injected somewhere in the corpus.
    assert all(report.fault_counts[name] > 0 for name in FAULT_CLASSES), report.fault_counts


def test_cli_json_report_has_every_field() -> None:
    """`longcall sim --json` prints one JSON object with the gate values and exits 0."""
    result = CliRunner().invoke(main, ["sim", "--permutations", "20", "--seed", "5", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for field in (
        "permutations",
        "seed",
        "terminal_divergence",
        "duplicate_operations",
        "receipts_per_node_max",
        "poll_qps_max",
        "poll_qps_limit",
        "cancel_ack_p99_s",
        "unknown_reconcile_max_s",
        "traceability",
        "fault_counts",
        "failures",
        "elapsed_s",
        "permutations_per_s",
    ):
        assert field in data
    assert set(data["fault_counts"]) >= set(FAULT_CLASSES)
    assert data["permutations"] == 20
    assert data["seed"] == 5


def test_cli_table_report_and_replay() -> None:
    """The table report exits 0; `--replay SEED` prints the same trace twice."""
    runner = CliRunner()
    table = runner.invoke(main, ["sim", "--permutations", "10"])
    assert table.exit_code == 0, table.output
    assert "release gates" in table.output
    first = runner.invoke(main, ["sim", "--replay", "12345"])
    second = runner.invoke(main, ["sim", "--replay", "12345"])
    assert first.exit_code == 0
    assert first.output == second.output
    assert first.output.splitlines()[0].split()[1] == "config"
    assert first.output.rstrip().endswith("verdict: ok")
