"""Shadow calls (SPEC R1): a new call of a read-only tool is copied to the protocol's
shadow adapter version under a derived call node; the copy advances nothing
downstream, never touches its primary, and the two outcomes are compared."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from tests.bounds import LOADED_MACHINE_S
from tests.runtime.test_engine import binding

from longcall.adapters.base import Adapter, Outcome, ToolBinding
from longcall.cli import main
from longcall.core import OperationRecord, ServerStatus, State
from longcall.core import events as e
from longcall.core.keys import canonical_json, digest_bytes
from longcall.core.record import ResultKind
from longcall.ledger import AdapterPlan, Ledger, SQLiteLedger
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor
from longcall.runtime.rollout import shadow_call_node, shadow_report

pytestmark = pytest.mark.anyio
BOUND_S = LOADED_MACHINE_S
SHADOW = shadow_call_node("n", "2")


class VersionedServer(Adapter):
    """A task server whose tool answers with the value set for the adapter version
    the operation is bound to (a second version that reads results differently)."""

    protocol = "test"
    version = "1"

    def __init__(self, values: Mapping[str, object], *, failing: Collection[str] = ()) -> None:
        self.values = dict(values)
        self.failing = set(failing)
        self.created: Counter[str] = Counter()

    async def bind(self, tool_name: str) -> ToolBinding:
        raise AssertionError("bound by the test")

    async def submit(self, record: OperationRecord, arguments: Mapping[str, Any]) -> Outcome:
        self.created[record.call_node_id] += 1
        return Outcome(
            event=e.SubmitAcknowledged(operation_id=f"op-{record.call_node_id}", poll_interval_s=1)
        )

    async def lookup(self, record: OperationRecord) -> Outcome:
        if record.call_node_id not in self.created:
            return Outcome(event=e.SubmissionNeverCreated())
        return Outcome(event=e.SubmissionFound(operation_id=f"op-{record.call_node_id}"))

    async def poll(self, record: OperationRecord) -> Outcome:
        status = (
            ServerStatus.FAILED
            if record.adapter_version in self.failing
            else ServerStatus.COMPLETED
        )
        return Outcome(event=e.TerminalObserved(status=status))

    async def fetch_result(self, record: OperationRecord) -> Outcome:
        failed = record.adapter_version in self.failing
        payload = canonical_json({"value": self.values.get(record.adapter_version)})
        return Outcome(
            event=e.ResultFetched(
                status=ServerStatus.FAILED if failed else ServerStatus.COMPLETED,
                result_kind=ResultKind.TOOL_ERROR if failed else ResultKind.VALUE,
                result_digest=digest_bytes(payload),
            ),
            payload=payload,
        )

    async def cancel(self, record: OperationRecord) -> Outcome:
        raise AssertionError("nothing is cancelled here")

    async def send_input(
        self, record: OperationRecord, answers: Mapping[str, Any]
    ) -> Outcome | None:
        raise AssertionError("no input is asked for here")


class Clock:
    """Virtual time: a quarter second passes at every reading, so no wait is real."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def shadow_plan(ledger: Ledger) -> None:
    ledger.set_rollout(AdapterPlan(protocol="test", adapter_version="1", state="enabled"))
    ledger.set_rollout(AdapterPlan(protocol="test", adapter_version="2", state="shadow"))


async def drive(ledger: Ledger, server: VersionedServer, spec: CallSpec) -> OperationRecord:
    """Call through an executor alone on its ledger and run it until nothing is open;
    returns what a caller waiting on the primary sees."""

    async def factory(url: str, protocol: str) -> Adapter:
        return server

    executor = Executor(
        ledger,
        adapter_factory=factory,
        single_process=True,
        clock=Clock(),
        rng=random.Random(0),
    )
    try:
        with anyio.fail_after(BOUND_S):
            await executor.acall(spec)
            waited = anyio.Event()
            seen: list[OperationRecord] = []

            async def wait() -> None:
                seen.append(await executor.wait_terminal(spec.call_node_id))
                waited.set()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(wait)
                await executor.run(until_idle=True)
                await waited.wait()
    finally:
        await executor.aclose()
    return seen[0]


def spec(*, read_only: bool = True) -> CallSpec:
    return CallSpec(call_node_id="n", binding=binding(read_only=read_only), arguments={"q": "rows"})


async def test_a_read_only_call_is_shadowed_and_the_same_outcome_matches(tmp_path: Path) -> None:
    """The shadow is its own operation under the derived node, bound to the shadow
    version: one remote operation per node, a receipt each, an outbox row only for the
    primary, and the pair recorded as a match."""
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        shadow_plan(ledger)
        server = VersionedServer({"1": 7, "2": 7})
        primary = await drive(ledger, server, spec())
        assert primary.call_node_id == "n"
        assert primary.state is State.ACCEPTED
        shadow = ledger.get(SHADOW)
        assert (shadow.shadow_of, shadow.adapter_version, shadow.state) == (
            "n",
            "2",
            State.ACCEPTED,
        )
        assert ledger.get("n").adapter_version == "1"
        assert server.created == {"n": 1, SHADOW: 1}
        assert {r.call_node_id for r in ledger.receipts()} == {"n", SHADOW}
        assert [row.call_node_id for row in ledger.outbox()] == ["n"]
        (comparison,) = ledger.shadow_comparisons()
        assert (comparison.primary_node, comparison.verdict) == ("n", "match")
        (tally,) = shadow_report(ledger)
        assert (tally.adapter_version, tally.matched, tally.differed, tally.pending) == (
            "2",
            1,
            [],
            [],
        )


async def test_a_shadow_that_answers_differently_is_reported(tmp_path: Path) -> None:
    """The shadow version reads another result: the primary is accepted as usual and
    its waiter sees only it; the comparison says what differed; the CLI shows it."""
    path = tmp_path / "l.db"
    with SQLiteLedger(path) as ledger:
        shadow_plan(ledger)
        server = VersionedServer({"1": 7, "2": 8})
        primary = await drive(ledger, server, spec())
        assert primary.call_node_id == "n"
        assert json.loads(ledger.result_payload("n") or b"") == {"value": 7}
        (comparison,) = ledger.shadow_comparisons()
        assert comparison.verdict == "differ"
        assert comparison.detail.startswith("result digest: sha256:")
        assert [row.call_node_id for row in ledger.outbox()] == ["n"]
    runner = CliRunner()
    url = f"sqlite:///{path}"
    shown = runner.invoke(main, ["rollout", "shadow-report", "--json", "--ledger", url])
    assert shown.exit_code == 0, shown.output
    (row,) = json.loads(shown.output)
    assert (row["protocol"], row["adapter_version"], row["matched"]) == ("test", "2", 0)
    assert [(d["shadow"], d["primary"]) for d in row["differed"]] == [(SHADOW, "n")]
    table = runner.invoke(main, ["rollout", "shadow-report", "--ledger", url])
    assert table.exit_code == 0, table.output
    assert SHADOW in table.output
    assert "result digest" in table.output
    listed = runner.invoke(main, ["ops", "list", "--ledger", url])
    assert listed.exit_code == 0, listed.output
    assert "shadow of n" in listed.output


async def test_a_failing_shadow_never_touches_its_primary(tmp_path: Path) -> None:
    """The shadow version fails where the primary succeeds: the primary is accepted with
    its value, the shadow with its failure, and the difference is in the status."""
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        shadow_plan(ledger)
        server = VersionedServer({"1": 7, "2": 7}, failing={"2"})
        primary = await drive(ledger, server, spec())
        assert primary.state is State.ACCEPTED
        assert primary.result_kind is ResultKind.VALUE
        assert ledger.get(SHADOW).result_kind is ResultKind.TOOL_ERROR
        (comparison,) = ledger.shadow_comparisons()
        assert comparison.verdict == "differ"
        assert "status: completed (primary) != failed (shadow)" in comparison.detail


async def test_a_tool_without_the_read_only_hint_is_not_shadowed(tmp_path: Path) -> None:
    """Only a tool that declares itself read-only is copied: any other one could change
    something twice."""
    with SQLiteLedger(tmp_path / "l.db") as ledger:
        shadow_plan(ledger)
        server = VersionedServer({"1": 7, "2": 7})
        await drive(ledger, server, spec(read_only=False))
        assert ledger.find(SHADOW) is None
        assert server.created == {"n": 1}
        assert ledger.shadow_pairs() == []
        assert shadow_report(ledger) == []


def test_rollout_shadow_says_which_calls_are_copied(tmp_path: Path) -> None:
    """``rollout shadow`` says that only read-only tools are shadowed."""
    done = CliRunner().invoke(
        main, ["rollout", "shadow", "test", "2", "--ledger", f"sqlite:///{tmp_path / 'l.db'}"]
    )
    assert done.exit_code == 0, done.output
    assert "test 2: shadow" in done.output
    assert "readOnlyHint" in done.output
