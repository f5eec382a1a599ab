"""The operator's reads of the ledger (the console's list): filters, pages, counts, and
the waiting-on rule, which the SQL filter and the banner's Python must agree on, on
both backends."""

from __future__ import annotations

import dataclasses

from longcall.console.waiting import waiting_on
from longcall.core import ServerStatus, State
from longcall.ledger import WAITING_REASONS, Ledger, OperationQuery
from longcall.testing.sample import KINDS, fill

NOW = 1_800_000_000.0


def test_every_kind_is_made_and_counted(ledger: Ledger) -> None:
    """The sample makes every local state; counts per state add up to the operations."""
    fill(ledger, now=NOW, worker="w1")
    counts = ledger.count_by_state()
    assert set(counts) == set(State)
    assert sum(counts.values()) == len(KINDS)
    assert ledger.count(OperationQuery()) == len(KINDS)


def test_the_waiting_filter_and_the_banner_agree(ledger: Ledger) -> None:
    """For every operation, the SQL waiting filter that selects it names the reason the
    banner's rule gives; each reason selects at least one of the sample."""
    nodes = fill(ledger, now=NOW, worker="w1")
    later = NOW + 100.0
    live = {w.owner for w in ledger.workers() if w.lease_until > later}
    by_sql = {
        row.record.call_node_id: reason
        for reason in WAITING_REASONS
        for row in ledger.browse(OperationQuery(waiting=reason, now=later, limit=100))
    }
    assert set(by_sql) == set(nodes.values())
    for row in ledger.browse(OperationQuery(limit=100)):
        banner = waiting_on(row.record, owner=row.owner, live_owners=live, now=later)
        assert by_sql[row.record.call_node_id] == banner.reason, row.record.call_node_id
    assert set(by_sql.values()) == set(WAITING_REASONS)
    # Once the worker's lease lapses, everything it held waits for a worker.
    lapsed = {r.record.call_node_id for r in ledger.browse(
        OperationQuery(waiting="worker", now=NOW + 200_000.0, limit=100))}  # fmt: skip
    assert nodes["working"] in lapsed
    assert nodes["retrying"] in lapsed


def test_filters_select_what_they_name(ledger: Ledger) -> None:
    """State, tool, server, server status, search by node, prefix or task id, epoch."""
    nodes = fill(ledger, now=NOW, server="http://a/mcp")
    fill(ledger, now=NOW, prefix="b-", server="http://b/mcp")

    def found(**fields: object) -> set[str]:
        query = OperationQuery(limit=100, **fields)  # type: ignore[arg-type]
        return {row.record.call_node_id for row in ledger.browse(query)}

    assert found(states=(State.INPUT_REQUIRED,)) == {"input_required", "b-input_required"}
    assert found(tool="deploy") == {"reconcile_unsent", "b-reconcile_unsent"}
    assert found(server="http://b/mcp") == {f"b-{k}" for k in KINDS}
    assert found(server_status=ServerStatus.FAILED, server="http://a/mcp") == {
        "tool_error",
        "protocol_error",
    }
    assert found(search="b-working") == {"b-working"}
    assert found(search="b-work") == {"b-working"}
    assert found(search="task-working") == {nodes["working"]}
    assert found(min_epoch=1) == set()
    assert ledger.count(OperationQuery(server="http://a/mcp", waiting="operator")) == 2


def test_pages_follow_creation_order_without_gaps(ledger: Ledger) -> None:
    """Newest first, page by page from the last row's seq; oldest first likewise."""
    fill(ledger, now=NOW)
    fill(ledger, now=NOW, prefix="b-")
    seen: list[str] = []
    query = OperationQuery(limit=5)
    while True:
        page = ledger.browse(query)
        if not page:
            break
        seen += [row.record.call_node_id for row in page]
        query = dataclasses.replace(query, after_seq=page[-1].seq)
    assert len(seen) == len(set(seen)) == 2 * len(KINDS)
    assert seen[0] == f"b-{KINDS[-1]}"
    assert seen[-1] == KINDS[0]
    oldest = ledger.browse(OperationQuery(limit=3, oldest_first=True))
    assert [r.record.call_node_id for r in oldest] == list(KINDS[:3])


def test_created_bounds_and_outbox_row(ledger: Ledger) -> None:
    """The age bounds compare the ledger's creation stamps; an accepted node has its one
    outbox row, an open one none."""
    nodes = fill(ledger, now=NOW)
    stamps = [row.created_at_utc for row in ledger.browse(OperationQuery(oldest_first=True))]
    assert stamps == sorted(stamps)  # the stamps sort as time does
    middle = stamps[len(stamps) // 2]
    newer = ledger.count(OperationQuery(created_after_utc=middle))
    older = ledger.count(OperationQuery(created_before_utc=middle))
    assert newer + older == len(KINDS)
    assert 0 < older < len(KINDS)
    outbox = ledger.outbox_of(nodes["accepted_ok"])
    assert outbox is not None
    assert outbox.call_node_id == nodes["accepted_ok"]
    assert ledger.outbox_of(nodes["working"]) is None


def test_server_use_counts_open_and_failing(ledger: Ledger) -> None:
    """Per server and protocol version: operations, open ones, and failing ones."""
    fill(ledger, now=NOW, server="http://a/mcp")
    (use,) = ledger.server_use()
    assert (use.server, use.protocol, use.adapter_version) == ("http://a/mcp", "2026-07-28", "1")
    assert (use.operations, use.open, use.failing) == (len(KINDS), 11, 1)


def test_the_failing_flag_follows_each_write(ledger: Ledger) -> None:
    """A failed request marks the open operation failing (the retry filter and the
    failing servers find it); the next good answer and the acceptance clear it."""
    from longcall.core import events as e
    from longcall.runtime.step import apply_event

    nodes = fill(ledger, now=NOW, worker="w1")
    node = nodes["retrying"]

    def retrying() -> set[str]:
        query = OperationQuery(waiting="backoff", now=NOW + 1.0, limit=100)
        return {row.record.call_node_id for row in ledger.browse(query)}

    assert retrying() == {node}
    assert ledger.server_use()[0].failing == 1
    record = ledger.get(node)
    apply_event(ledger, record, e.WorkingObserved(status_message="back"), now=NOW + 60, jitter=0.5)
    assert retrying() == set()
    assert ledger.server_use()[0].failing == 0


def test_input_requests_come_nearest_deadline_first(ledger: Ledger) -> None:
    """Over every operation waiting for a person, the nearest deadline comes first,
    whatever the creation order; without that order the oldest comes first."""
    fill(ledger, now=NOW, prefix="late-")
    fill(ledger, now=NOW - 1_000.0, prefix="soon-")  # created after, due before
    query = OperationQuery(waiting="person", now=NOW, oldest_first=True, limit=10)
    by_age = [row.record.call_node_id for row in ledger.browse(query)]
    assert by_age == ["late-input_required", "soon-input_required"]
    nearest = dataclasses.replace(query, nearest_input_deadline_first=True)
    rows = ledger.browse(nearest)
    assert [row.record.call_node_id for row in rows] == by_age[::-1]
    deadlines = [row.record.input_deadline_at for row in rows]
    assert deadlines == sorted(deadlines)  # type: ignore[type-var]
    assert ledger.browse(dataclasses.replace(nearest, limit=1))[0].record.call_node_id == (
        "soon-input_required"
    )


def test_failing_operations_are_counted_per_server_alone(ledger: Ledger) -> None:
    """The failing count per server and version is the same read the server use makes."""
    fill(ledger, now=NOW, server="http://a/mcp")
    fill(ledger, now=NOW, prefix="b-", server="http://b/mcp")
    assert ledger.failing_by_server() == {
        ("http://a/mcp", "2026-07-28", "1"): 1,
        ("http://b/mcp", "2026-07-28", "1"): 1,
    }
    assert {(u.server, u.failing) for u in ledger.server_use()} == {
        ("http://a/mcp", 1),
        ("http://b/mcp", 1),
    }
