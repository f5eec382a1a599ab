"""Generated docs stay in step with the code: docs/states.md is what
scripts/gen_state_diagram.py prints for the current transition table (SPEC L2).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.bounds import LOADED_MACHINE_S

from longcall.core.states import TERMINAL_STATES, TRANSITIONS, State

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen_state_diagram.py"
DOC = ROOT / "docs" / "states.md"


def _generate() -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=LOADED_MACHINE_S,
    )
    return done.stdout


def test_states_doc_is_current() -> None:
    """docs/states.md equals the generator's output (run `make docs` when this fails)."""
    assert DOC.read_text(encoding="utf-8") == _generate(), "docs/states.md is stale: make docs"


def test_diagram_has_every_table_edge_and_every_state() -> None:
    """Each (source, target) of the table is an edge labelled with all its events."""
    text = _generate()
    assert "stateDiagram-v2" in text
    assert "    [*] --> SUBMITTING\n" in text
    for state in TERMINAL_STATES:
        assert f"    {state.name} --> [*]\n" in text
    labels: dict[tuple[str, str], set[str]] = {}
    for line in text.splitlines():
        if " --> " in line and " : " in line:
            arrow, label = line.strip().split(" : ")
            source, target = arrow.split(" --> ")
            labels[(source, target)] = set(label.split(", "))
    expected: dict[tuple[str, str], set[str]] = {}
    for (source, event), targets in TRANSITIONS.items():
        for target in targets:
            expected.setdefault((source.name, target.name), set()).add(event)
    assert labels == expected
    for state in State:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{state.name}` |"))
        assert row.rstrip(" |").split("|")[-1].strip(), f"{state.name} has no description"


def test_generator_is_deterministic() -> None:
    """Two runs print the same bytes."""
    assert _generate() == _generate()
