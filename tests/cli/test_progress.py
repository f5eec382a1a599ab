"""The progress bar of ``call --wait`` / ``ops wait``: it fills from the reported fraction,
says when the server is unreachable, and leaves nothing behind when the call settles."""

from __future__ import annotations

import io

from rich.console import Console

from longcall.cli.show import ProgressView
from longcall.client import Progress, fraction_of


def test_the_bar_fills_and_says_when_the_server_is_unreachable() -> None:
    """A fraction sets the bar; an unreachable report says so; the bar is transient."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    with ProgressView("n", enabled=True, console=console) as view:
        (task,) = view.progress.tasks
        assert task.total is None  # unknown until a fraction arrives
        view.update(Progress(call_node_id="n", fraction=0.25, message="step 5/20"))
        assert (task.total, task.completed) == (1.0, 0.25)
        view.update(Progress(call_node_id="other", fraction=0.9, message="not ours"))
        assert task.completed == 0.25
        view.update(
            Progress(call_node_id="n", fraction=None, message="HTTP 503", server_unreachable=True)
        )
        assert "server unreachable" in task.description
        view.update(Progress(call_node_id="n", fraction=1.0, message="step 20/20"))
        assert task.completed == 1.0
    assert view.progress.live.transient


def test_a_fraction_is_read_from_status_text() -> None:
    """``step 3/20``, ``3 of 4`` and ``40%`` carry a fraction; other text carries none."""
    assert fraction_of("step 3/20") == 0.15
    assert fraction_of("crawled page 3 of 4") == 0.75
    assert fraction_of("40% done") == 0.4
    assert fraction_of("working") is None
    assert fraction_of(None) is None
    assert fraction_of("step 30/20") == 1.0
