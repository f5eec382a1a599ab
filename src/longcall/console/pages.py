"""The console's pages, rendered from what the ledger holds.

Owns: one function per page (home, operations list, one operation, input inbox,
reconciliation queue, servers and workers) turning ledger reads into :class:`Html`,
the layout around them, the forms of every action (each carrying what it was drawn
from: the row version, or the state with the cancel generation or input round; and a
fresh action id) and the CLI line that does the same. Every
string from a server, a tool or a person goes through :func:`~longcall.console.html.el`
as text. Must not: write the ledger, or hold any rule of what an action may do (the
client's commands decide; :mod:`longcall.console.waiting` says what the evidence
allows).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from longcall.client import CallOutcome, accepted_outcome, outcome_of
from longcall.console.html import Child, Html, el, join, node_url, url
from longcall.console.waiting import (
    Fold,
    Waiting,
    breaker_until,
    clocks,
    duration,
    relative,
    resolutions,
    stamp,
    timeline,
    waiting_on,
)
from longcall.core import OperationRecord, ResultKind, ServerStatus, State
from longcall.core.events import Resolution
from longcall.core.retry import BreakerState
from longcall.ledger import (
    WAITING_REASONS,
    BreakerRow,
    HistoryRow,
    Holding,
    Ledger,
    ListedOperation,
    OperationQuery,
    PollBudgetRow,
    RefusedWrite,
    WorkerRow,
)
from longcall.ledger.budget import slots_per_minute_max
from longcall.runtime.inputs import InputQuestion, InputRequest, pending_request

PAGE_SIZE = 50
RESULT_PAGE_LINES = 200
HEALTH_WINDOW = 300
"""The health figures are over the last this many accepted operations: each one's few
fields are read at every home page (the worker's own median is over 1,000, in memory)."""
RETRY_WINDOW_S = 3600.0
"""The retried requests per server are counted over this last stretch of history."""
QUEUE_LIMIT = 200
"""Rows of the inbox and the reconciliation queue read per page (oldest first)."""
AGES = {"": "any age", "lt1h": "newer than 1 h", "lt24h": "newer than 24 h",
        "gt1h": "older than 1 h", "gt24h": "older than 24 h"}  # fmt: skip
_AGE_BOUNDS = {"lt1h": ("after", 3600), "lt24h": ("after", 86400),
               "gt1h": ("before", 3600), "gt24h": ("before", 86400)}  # fmt: skip
WAITING_WORDS = {
    "operator": "an operator",
    "person": "a person",
    "worker": "a worker",
    "backoff": "a retry (backoff)",
    "server": "the server",
    "nothing": "nothing (accepted)",
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """What every page needs besides the ledger."""

    ledger_shown: str
    """The ledger's URL without any password."""
    cli_ledger: str
    """`` --ledger URL`` for CLI lines ('' for the default ledger)."""
    new_action: Callable[[], str]
    now: float
    flash: Html | None = None


# --- small pieces --------------------------------------------------------------------


def utc_stamp(at: float) -> str:
    """A time as the ledger stamps its rows (text that sorts as time does)."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="microseconds")


def stamp_seconds(text: str) -> float | None:
    """A ledger stamp as seconds (None if it is not one)."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def node_link(node: str) -> Html:
    return el("a", node, href=node_url(node), class_="node")


def cli(line: str) -> Html:
    return el("p", el("span", "CLI: ", class_="label"), el("code", line), class_="cli")


def quoted(text: str) -> str:
    return shlex.quote(text)


def state_badge(state: State) -> Html:
    return el("span", state.value, class_=f"state s-{state.value}")


def outcome_badge(record: OperationRecord) -> Html:
    outcome = outcome_of(record)
    return el("span", outcome.value, class_=f"outcome o-{outcome.value}")


def table(head: Sequence[str], rows: Iterable[Sequence[Child]], **attrs: object) -> Html:
    return el(
        "table",
        el("thead", el("tr", [el("th", h) for h in head])),
        el("tbody", [el("tr", [el("td", cell) for cell in row]) for row in rows]),
        **attrs,
    )


def hidden(**fields: object) -> Html:
    return join(el("input", type="hidden", name=k, value=v) for k, v in fields.items())


def layout(title: str, view: View, body: Child, *, counts: Mapping[State, int]) -> Html:
    inbox = counts.get(State.INPUT_REQUIRED, 0)
    queue = counts.get(State.RECONCILIATION_REQUIRED, 0)
    nav = el(
        "nav",
        el("a", "longcall console", href="/", class_="brand"),
        el("a", "Home", href="/"),
        el("a", "Operations", href="/operations"),
        el("a", "Input inbox ", el("span", inbox, class_="count"), href="/inbox"),
        el("a", "Reconciliation ", el("span", queue, class_="count"), href="/reconcile"),
        el("a", "Servers & workers", href="/servers"),
        el("span", "live", id="live", class_="live", title="updates without a reload"),
    )
    return Html(
        "<!doctype html>"
        + el(
            "html",
            el(
                "head",
                el("meta", charset="utf-8"),
                el("meta", name="viewport", content="width=device-width, initial-scale=1"),
                el("title", f"{title} — longcall console"),
                el("link", rel="stylesheet", href="/static/console.css"),
                el("script", src="/static/console.js", defer=True),
            ),
            el(
                "body",
                el(
                    "header",
                    nav,
                    el("p", "ledger: ", el("code", view.ledger_shown), class_="where"),
                ),
                el("main", view.flash, el("h1", title), body),
            ),
            lang="en",
        )
    )


# --- home ----------------------------------------------------------------------------


def home(ledger: Ledger, view: View) -> Html:
    counts = ledger.count_by_state()
    needs = el(
        "section",
        el("h2", "Needs you"),
        _inbox_summary(ledger, view),
        _queue_summary(ledger, view),
        _open_breakers(ledger, view),
        _failing_servers(ledger),
        id="needs",
        data_live=True,
    )
    state_rows = [
        (el("a", state.value, href=url("/operations", state=state.value)), counts.get(state, 0))
        for state in State
    ]
    states = el(
        "section",
        el("h2", "Operations by local state"),
        table(("state", "operations"), state_rows, class_="counts"),
        el("p", el("a", f"All {sum(counts.values())} operations →", href="/operations")),
        id="states",
        data_live=True,
    )
    body = [
        needs,
        states,
        el(
            "section",
            el("h2", "Health"),
            _health(ledger, counts, view.now),
            id="health",
            data_live=True,
        ),
        cli(
            "longcall ops list --state input_required --state reconciliation_required"
            + view.cli_ledger
        ),
    ]
    return layout("Home", view, body, counts=counts)


def _inbox_summary(ledger: Ledger, view: View) -> Html:
    requests, waiting = _waiting_for_people(ledger, view.now, limit=10)
    if not requests:
        return el("p", "No input request waits for an answer.", class_="quiet")
    rows = [
        (
            node_link(r.call_node_id),
            "; ".join(q.message or q.key for q in r.questions),
            relative(r.deadline_at, view.now),
            relative(created, view.now),
        )
        for r, created in requests
    ]
    return el(
        "div",
        el("h3", el("a", f"Input requests ({waiting})", href="/inbox")),
        table(("call node", "question", "deadline", "asked"), rows, class_="inbox-summary"),
    )


def _queue_summary(ledger: Ledger, view: View) -> Html:
    items = ledger.browse(
        OperationQuery(states=(State.RECONCILIATION_REQUIRED,), oldest_first=True, limit=10)
    )
    if not items:
        return el("p", "Nothing waits for reconciliation.", class_="quiet")
    rows = [
        (
            node_link(i.record.call_node_id),
            i.record.reconciliation_reason or "",
            relative(i.record.updated_at, view.now),
        )
        for i in items
    ]
    return el(
        "div",
        el("h3", el("a", "Reconciliation queue", href="/reconcile")),
        table(("call node", "why", "since"), rows, class_="queue-summary"),
    )


def live_owners(ledger: Ledger, now: float) -> set[str]:
    """The lease holders whose lease runs at ``now``."""
    return {w.owner for w in ledger.workers() if w.lease_until > now}


def open_breakers(ledger: Ledger, now: float) -> list[BreakerRow]:
    """The open breakers of holders whose lease runs: theirs hold requests back."""
    live = live_owners(ledger, now)
    return [b for b in ledger.breakers() if b.state is BreakerState.OPEN and b.owner in live]


def _open_breakers(ledger: Ledger, view: View) -> Html:
    found = open_breakers(ledger, view.now)
    if not found:
        return el("p", "No worker's circuit breaker is open.", class_="quiet")
    rows = [
        (b.server, b.owner, breaker_until(b, view.now), b.failures, b.last_error or "—")
        for b in found
    ]
    return el(
        "div",
        el("h3", el("a", f"Open circuit breakers ({len(found)})", href="/servers")),
        table(
            ("server", "worker", "state", "failures in a row", "last error"),
            rows,
            class_="breakers-open",
        ),
    )


def _failing_servers(ledger: Ledger) -> Html:
    failing = sorted(ledger.failing_by_server().items())
    if not failing:
        return el("p", "No open operation's last request failed.", class_="quiet")
    rows = [(server, f"{protocol} / {version}", n) for (server, protocol, version), n in failing]
    return el(
        "div",
        el("h3", "Servers whose requests fail now (open operations whose last request failed)"),
        table(("server", "protocol / adapter", "retrying now"), rows, class_="failing"),
    )


def _health(ledger: Ledger, counts: Mapping[State, int], now: float) -> Html:
    recent = ledger.recent_accepted(limit=HEALTH_WINDOW)
    accepted = [r for r in recent if r.state is State.ACCEPTED]
    ok = sum(
        1
        for r in accepted
        if accepted_outcome(r.state, r.result_kind, r.server_status) is CallOutcome.OK
    )
    durations = [r.updated_at - r.created_at for r in recent]
    cancels = [
        r.cancel_acknowledged_at - r.cancel_requested_at
        for r in recent
        if r.cancel_acknowledged_at is not None and r.cancel_requested_at is not None
    ]
    retries = ledger.retries_by_server(since_utc=utc_stamp(now - RETRY_WINDOW_S))
    recoveries = ledger.count(OperationQuery(min_epoch=2))
    unknown = counts.get(State.SUBMISSION_UNKNOWN, 0) + counts.get(State.RECONCILIATION_REQUIRED, 0)
    figures: list[tuple[str, Child]] = [
        (
            "completion rate",
            f"{ok} of {len(accepted)} accepted completed ok ({100 * ok / len(accepted):.0f} %)"
            if accepted
            else "no accepted operation yet",
        ),
        ("median duration", duration(statistics.median(durations)) if durations else "—"),
        (
            f"retried requests per server (last {duration(RETRY_WINDOW_S)})",
            join(
                el("div", f"{r.server}: {r.retried} retried, {r.given_up} given up", class_="retry")
                for r in retries
            )
            if retries
            else "no request failed",
        ),
        ("recoveries (claimed again after a worker stopped)", recoveries),
        ("outcome UNKNOWN (submission unknown + reconciliation)", unknown),
        ("median cancel latency", duration(statistics.median(cancels)) if cancels else "—"),
    ]
    note = el(
        "p",
        f"Completion, durations and cancel latency are over the last {len(recent)} accepted"
        f" operations (at most {HEALTH_WINDOW}); retried requests are read from the"
        " operations' history. A worker's own counters are on its /metrics endpoint.",
        class_="quiet",
    )
    return join(
        [el("dl", [join((el("dt", k), el("dd", v))) for k, v in figures], class_="figures"), note]
    )


def _waiting_for_people(
    ledger: Ledger, now: float, *, limit: int = QUEUE_LIMIT
) -> tuple[list[tuple[InputRequest, float]], int]:
    """The first ``limit`` pending input requests, nearest deadline first (none last),
    then oldest first, ordered by the ledger over every one that waits; and how many
    wait. Only the requests shown are read and have their questions read."""
    query = OperationQuery(waiting="person", now=now, oldest_first=True, limit=limit)
    rows = ledger.browse(dataclasses.replace(query, nearest_input_deadline_first=True))
    found: list[tuple[InputRequest, float]] = []
    for row in rows:
        request = pending_request(ledger, row.record)
        if request is not None:
            found.append((request, row.record.created_at))
    return found, ledger.count(query)


# --- operations list -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    """The list page's filters, as given in its query string."""

    state: str = ""
    status: str = ""
    tool: str = ""
    server: str = ""
    age: str = ""
    waiting: str = ""
    q: str = ""
    after: str = ""

    @classmethod
    def of(cls, params: Mapping[str, str]) -> Filters:
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{n: params.get(n, "").strip()[:500] for n in names})

    def query(self, now: float) -> OperationQuery:
        """The ledger query (unknown values refused by the enums, as ValueError)."""
        after = before = None
        if self.age:
            if self.age not in _AGE_BOUNDS:
                raise ValueError(f"no age {self.age!r} (use {', '.join(a for a in AGES if a)})")
            side, seconds = _AGE_BOUNDS[self.age]
            bound = utc_stamp(now - seconds)
            after, before = (bound, None) if side == "after" else (None, bound)
        return OperationQuery(
            states=(State(self.state),) if self.state else (),
            server_status=ServerStatus(self.status) if self.status else None,
            tool=self.tool or None,
            server=self.server or None,
            created_after_utc=after,
            created_before_utc=before,
            search=self.q or None,
            waiting=self.waiting or None,
            now=now,
            after_seq=int(self.after) if self.after else None,
            limit=PAGE_SIZE + 1,
        )

    def link(self, **changes: str) -> str:
        values = dataclasses.asdict(self) | changes
        return url("/operations", **values)


def operations(ledger: Ledger, view: View, filters: Filters) -> Html:
    counts = ledger.count_by_state()
    rows = ledger.browse(filters.query(view.now))
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    live = {w.owner for w in ledger.workers() if w.lease_until > view.now}
    body_rows = [_list_row(row, live, view.now) for row in rows]
    pager = [el("a", "← first page", href=filters.link(after=""))] if filters.after else []
    if more:
        pager.append(el("a", "next page →", href=filters.link(after=str(rows[-1].seq)), rel="next"))
    listing = el(
        "section",
        table(
            (
                "call node",
                "state",
                "outcome",
                "waiting on",
                "tool",
                "server",
                "server status",
                "created",
                "note",
            ),
            body_rows,
            class_="ops",
            id="ops-table",
        ),
        el("p", f"{len(rows)} shown" + ("" if rows else ": nothing matches"), class_="quiet"),
        el("nav", pager, class_="pager"),
        id="list",
        data_live=True,
    )
    cli_line = "longcall ops list" + (f" --state {filters.state}" if filters.state else "")
    body = [
        _filter_form(filters),
        listing,
        cli(cli_line + view.cli_ledger),
        el(
            "p",
            "The CLI filters by state only; the other filters are the console's.",
            class_="quiet",
        ),
    ]
    return layout("Operations", view, body, counts=counts)


def _list_row(row: ListedOperation, live: set[str], now: float) -> list[Child]:
    r = row.record
    waiting = waiting_on(r, owner=row.owner, live_owners=live, now=now)
    return [
        node_link(r.call_node_id),
        state_badge(r.state),
        outcome_badge(r),
        el("span", WAITING_WORDS[waiting.reason], class_=f"waiting w-{waiting.reason}"),
        r.tool_name,
        r.server,
        r.server_status_raw or (r.server_status.value if r.server_status else ""),
        relative(stamp_seconds(row.created_at_utc), now),
        el("span", _note(r), class_="note"),
    ]


def _note(record: OperationRecord) -> str:
    if record.reconciliation_reason:
        return record.reconciliation_reason
    if record.warnings:
        return ", ".join(record.warnings)
    text = record.status_message or record.last_error or ""
    return text if len(text) <= 160 else text[:159] + "…"


def _select(name: str, current: str, options: Iterable[tuple[str, str]]) -> Html:
    return el(
        "select",
        [el("option", label, value=value, selected=value == current) for value, label in options],
        name=name,
        id=f"f-{name}",
    )


def _filter_form(filters: Filters) -> Html:
    def labelled(text: str, control: Html) -> Html:
        return el("label", text, control)

    return el(
        "form",
        labelled(
            "local state",
            _select("state", filters.state, [("", "any"), *((s.value, s.value) for s in State)]),
        ),
        labelled(
            "server status",
            _select(
                "status", filters.status, [("", "any"), *((s.value, s.value) for s in ServerStatus)]
            ),
        ),
        labelled(
            "waiting on",
            _select(
                "waiting",
                filters.waiting,
                [("", "anything"), *((w, WAITING_WORDS[w]) for w in WAITING_REASONS)],
            ),
        ),
        labelled("age", _select("age", filters.age, AGES.items())),
        labelled("tool", el("input", name="tool", value=filters.tool, id="f-tool")),
        labelled("server", el("input", name="server", value=filters.server, id="f-server")),
        labelled(
            "call node or task id",
            el("input", type="search", name="q", value=filters.q, id="f-q"),
        ),
        el("button", "Filter", type="submit"),
        el("a", "clear", href="/operations"),
        method="get",
        action="/operations",
        class_="filters",
    )


# --- one operation --------------------------------------------------------------------


def operation(ledger: Ledger, view: View, node: str, *, result_page: int) -> Html:
    counts = ledger.count_by_state()
    record = ledger.get(node)
    history = ledger.history(node)
    live = live_owners(ledger, view.now)
    owner = _owner_of(ledger, record)
    breaker = next(
        (b for b in ledger.breakers() if (b.server, b.owner) == (record.server, owner)), None
    )
    waiting = waiting_on(
        record, owner=owner, live_owners=live, now=view.now, history=history, breaker=breaker
    )
    body: list[Child] = [
        el(
            "section",
            _banner(record, waiting, view.now),
            _clocks(history, view.now),
            id="banner-box",
            data_live=True,
        ),
        _identity(record, owner),
        _actions(ledger, record, view),
        el(
            "section",
            el("h2", "Timeline"),
            _timeline(history, ledger.refused_writes(node)),
            id="timeline",
            data_live=True,
        ),
        _receipt(ledger, record, view, result_page),
        cli(f"longcall ops show {quoted(node)} --limit 0{view.cli_ledger}"),
    ]
    return layout(f"Operation {node}", view, body, counts=counts)


def _owner_of(ledger: Ledger, record: OperationRecord) -> str | None:
    rows = ledger.browse(OperationQuery(search=record.call_node_id, limit=5))
    return next((r.owner for r in rows if r.record.call_node_id == record.call_node_id), None)


def _banner(record: OperationRecord, waiting: Waiting, now: float) -> Html:
    if record.is_terminal:
        return el(
            "div",
            el("strong", "Accepted: "),
            outcome_badge(record),
            f" at {stamp(record.updated_at)}",
            class_="banner done",
            id="banner",
        )
    until = (
        f" — next at {stamp(waiting.until)} ({relative(waiting.until, now)})"
        if waiting.until
        else ""
    )
    return el(
        "div",
        el("strong", "Waiting on "),
        el("span", waiting.headline, class_="headline"),
        until,
        el("ul", [el("li", d) for d in waiting.details]),
        class_=f"banner w-{waiting.reason}",
        id="banner",
        data_reason=waiting.reason,
    )


def _clocks(history: Sequence[HistoryRow], now: float) -> Html:
    times = clocks(history, now=now)
    return el(
        "p",
        "working time ",
        el("strong", duration(times.working_s), id="working-time"),
        " · waiting for a person ",
        el("strong", duration(times.waiting_s), id="waiting-time"),
        class_="clocks",
    )


def _identity(record: OperationRecord, owner: str | None) -> Html:
    rows: list[tuple[str, Child]] = [
        ("call node", record.call_node_id),
        ("tool", f"{record.tool_name} (descriptor {record.tool_descriptor_digest[:23]}…)"),
        ("tool marked idempotent", "yes" if record.tool_idempotent else "no"),
        ("server", record.server),
        ("protocol / adapter version", f"{record.protocol} / {record.adapter_version}"),
        ("task (remote operation) id", record.operation_id or "none yet"),
        ("submission key", record.submission_key),
        ("execution epoch", record.execution_epoch),
        ("held by", owner or "nobody"),
        ("cancel generation", record.cancel_generation),
        ("created", stamp(record.created_at)),
        ("expires", stamp(record.expires_at)),
        ("wait budget ends", stamp(record.deadline_at)),
        ("row version", record.version),
    ]
    return el(
        "section", el("h2", "Identity"), table(("", ""), rows, class_="identity"), id="identity"
    )


def _actions(ledger: Ledger, record: OperationRecord, view: View) -> Html:
    node = record.call_node_id
    parts: list[Child] = []
    if record.state is State.INPUT_REQUIRED and record.input_keys_pending:
        request = pending_request(ledger, record)
        if request is not None:
            parts.append(answer_forms(request, record, view))
    if record.state is State.RECONCILIATION_REQUIRED:
        parts.append(reconcile_form(ledger, record, view))
    if not record.is_terminal:
        parts.append(
            el(
                "form",
                hidden(
                    node=node,
                    state=record.state.value,
                    cancel_generation=record.cancel_generation,
                    action_id=view.new_action(),
                ),
                el("button", "Request cancellation", type="submit", class_="danger"),
                cli(f"longcall ops cancel {quoted(node)}{view.cli_ledger}"),
                method="post",
                action="/act/cancel",
                class_="action cancel",
            )
        )
    if not parts:
        return Html("")
    return el("section", el("h2", "Actions"), parts, id="actions")


def _timeline(history: Sequence[HistoryRow], refused: Sequence[RefusedWrite]) -> Html:
    rows = [
        _fold_row(entry) if isinstance(entry, Fold) else _refusal_row(entry)
        for entry in timeline(history, refused)
    ]
    head = ("v", "event", "state", "written by", "epoch", "at (UTC)")
    return el(
        "table",
        el("thead", el("tr", [el("th", h) for h in head])),
        el("tbody", rows),
        class_="timeline",
    )


def _fold_row(fold: Fold) -> Html:
    first, last = fold.first, fold.last
    versions = str(first.version) if fold.count == 1 else f"{first.version}–{last.version}"
    event = first.event if fold.count == 1 else f"{first.event} ×{fold.count}"
    at = first.at_utc if fold.count == 1 else f"{first.at_utc} … {last.at_utc}"
    cells = (versions, event, state_badge(first.state), first.owner or "operator/caller",
             first.execution_epoch, at)  # fmt: skip
    return el("tr", [el("td", c) for c in cells])


REFUSAL_WORDS = {
    "fenced": "refused: another worker holds it at a newer epoch",
    "version_conflict": "refused: the row had moved past the version it was drawn from",
}


def _refusal_row(refusal: RefusedWrite) -> Html:
    drawn = "—" if refusal.expected_version is None else f"from v{refusal.expected_version}"
    cells = (
        drawn,
        f"{refusal.event} (not written)",
        el("span", REFUSAL_WORDS.get(refusal.reason, refusal.reason), class_="refusal",
           title=refusal.detail),
        refusal.owner or "operator/caller",
        refusal.execution_epoch,
        refusal.at_utc,
    )  # fmt: skip
    return el("tr", [el("td", c) for c in cells], class_="refused")


TOOL_ERROR_TEXT = (
    "Tool error: the tool itself reported a failure (MCP isError, or a failed run)."
    " The call reached the tool."
)
PROTOCOL_ERROR_TEXT = (
    "Protocol error: the server answered with a JSON-RPC error; this is not the tool's own result."
)
ZERO_ITEMS_TEXT = (
    "Zero items: the call completed but returned nothing. Check that the tool was asked for"
    " the right thing."
)


def _receipt(ledger: Ledger, record: OperationRecord, view: View, page: int) -> Html:
    if not record.is_terminal:
        return Html("")
    node = record.call_node_id
    receipt = ledger.receipt(node)
    outbox = ledger.outbox_of(node)
    parts: list[Child] = [el("h2", "Receipt and result")]
    kind = record.result_kind
    if kind is ResultKind.TOOL_ERROR:
        parts.append(el("p", TOOL_ERROR_TEXT, class_="error tool-error"))
    elif kind is ResultKind.PROTOCOL_ERROR:
        parts.append(el("p", PROTOCOL_ERROR_TEXT, class_="error protocol-error"))
    if "empty_result" in record.warnings:
        parts.append(el("p", ZERO_ITEMS_TEXT, class_="warning zero-items"))
    if record.resolved_by:
        parts.append(el("p", f"Settled by an operator — {record.resolved_by}", class_="warning"))
    rows: list[tuple[str, Child]] = []
    if receipt is not None:
        rows += [
            ("terminal status", receipt.terminal_status.value),
            ("result kind", receipt.result_kind.value),
            ("result digest", receipt.result_digest),
            ("accepted at", stamp(receipt.accepted_at)),
            ("warnings", ", ".join(receipt.warnings) or "none"),
        ]
    if outbox is not None:
        delivered = outbox.delivered_at_utc or "not yet"
        rows += [
            (
                "outbox row",
                f"#{outbox.outbox_id}, created {outbox.created_at_utc}, delivered {delivered}",
            )
        ]
    parts.append(table(("", ""), rows, class_="receipt"))
    parts.append(_result_pages(ledger, node, page))
    parts.append(cli(f"longcall ops result {quoted(node)} --json{view.cli_ledger}"))
    return el("section", parts, id="receipt")


def _result_pages(ledger: Ledger, node: str, page: int) -> Html:
    payload = ledger.result_payload(node)
    if payload is None:
        return el("p", "No result is stored.", class_="quiet")
    try:
        text = json.dumps(json.loads(payload), indent=2, sort_keys=True, ensure_ascii=False)
    except ValueError:
        text = payload.decode("utf-8", "replace")
    lines = text.splitlines()
    pages = max(1, -(-len(lines) // RESULT_PAGE_LINES))
    page = min(max(page, 1), pages)
    shown = "\n".join(lines[(page - 1) * RESULT_PAGE_LINES : page * RESULT_PAGE_LINES])
    links: list[Child] = [f"result page {page} of {pages} ({len(payload)} bytes) "]
    if page > 1:
        links.append(el("a", "← previous", href=url(node_url(node), page=page - 1)))
    if page < pages:
        links.append(el("a", "next →", href=url(node_url(node), page=page + 1), rel="next"))
    return join([el("p", links, class_="pager"), el("pre", shown, class_="result", id="result")])


# --- input inbox ---------------------------------------------------------------------


def inbox(ledger: Ledger, view: View) -> Html:
    counts = ledger.count_by_state()
    requests, _waiting = _waiting_for_people(ledger, view.now)
    items: list[Child] = []
    for request, _created in requests:
        record = ledger.get(request.call_node_id)
        items.append(
            el(
                "article",
                el(
                    "h2",
                    node_link(request.call_node_id),
                    " ",
                    el("span", record.tool_name, class_="tool"),
                ),
                el(
                    "p",
                    f"deadline {stamp(request.deadline_at)}"
                    f" ({relative(request.deadline_at, view.now)})"
                    f" · asked {relative(record.updated_at, view.now)}",
                    class_="quiet",
                ),
                answer_forms(request, record, view),
                class_="question",
                id=f"q-{request.call_node_id}",
            )
        )
    if not items:
        items.append(el("p", "No input request waits for an answer.", class_="quiet"))
    body = [
        el("section", items, id="inbox", data_live=True),
        cli(f"longcall ops list --state input_required{view.cli_ledger}"),
    ]
    return layout("Input inbox", view, body, counts=counts)


def answer_forms(request: InputRequest, record: OperationRecord, view: View) -> Html:
    """One form per question, bound to the state and input round it was drawn from (not
    the row version, which every poll of a waiting operation moves on)."""
    return join(_question_form(q, request, record, view) for q in request.questions)


def _question_form(
    question: InputQuestion, request: InputRequest, record: OperationRecord, view: View
) -> Html:
    node = request.call_node_id
    bound = {"node": node, "key": question.key, "input_round": request.input_round,
             "state": record.state.value, "version": record.version}  # fmt: skip
    controls: list[Child] = []
    for field in question.fields:
        name = f"field.{field.name}"
        if field.type == "boolean":
            control = _select(name, "", [("", "—"), ("true", "true"), ("false", "false")])
        elif field.choices:
            control = _select(name, "", [("", "—"), *((str(c), str(c)) for c in field.choices)])
        else:
            control = el("input", name=name, id=f"f-{name}", autocomplete="off")
        need = "required" if field.required else "optional"
        controls.append(
            el(
                "label",
                el("span", field.name, class_="field"),
                f" ({field.type or 'any'}, {need})",
                el("span", f" — {field.description}", class_="quiet")
                if field.description
                else None,
                control,
            )
        )
    if not question.is_form:
        controls.append(
            el(
                "label",
                "whole answer (JSON)",
                el("textarea", '{"action": "accept", "content": {}}', name="answer_json", rows="4"),
            )
        )
    pairs = " ".join(f"{f.name}={quoted(f.example())}" for f in question.fields if f.required)
    answer_line = (
        f"longcall ops answer {quoted(node)} --key {quoted(question.key)} {pairs}".rstrip()
        if question.is_form
        else f"longcall ops answer {quoted(node)} --key {quoted(question.key)} --json '…'"
    )
    return el(
        "div",
        el(
            "p",
            el("span", question.message or "(no message)", class_="message"),
            el("span", f" [key {question.key}, round {request.input_round}]", class_="quiet"),
        ),
        el(
            "form",
            hidden(**bound, action_id=view.new_action()),
            controls,
            el("button", "Answer", type="submit"),
            cli(answer_line + view.cli_ledger),
            method="post",
            action="/act/answer",
            class_="action answer",
        ),
        el(
            "form",
            hidden(**bound, action_id=view.new_action(), decline="1"),
            el("button", "Decline", type="submit", class_="danger"),
            cli(
                f"longcall ops answer {quoted(node)} --key {quoted(question.key)} --decline"
                + view.cli_ledger
            ),
            method="post",
            action="/act/answer",
            class_="action decline",
        ),
        class_="form-box",
    )


# --- reconciliation ------------------------------------------------------------------


def reconcile(ledger: Ledger, view: View) -> Html:
    counts = ledger.count_by_state()
    items = ledger.browse(
        OperationQuery(
            states=(State.RECONCILIATION_REQUIRED,), oldest_first=True, limit=QUEUE_LIMIT
        )
    )
    articles: list[Child] = [
        el(
            "article",
            el(
                "h2",
                node_link(i.record.call_node_id),
                " ",
                el("span", i.record.tool_name, class_="tool"),
            ),
            reconcile_form(ledger, i.record, view),
            class_="item",
            id=f"r-{i.record.call_node_id}",
        )
        for i in items
    ]
    if not articles:
        articles.append(el("p", "Nothing waits for reconciliation.", class_="quiet"))
    body = [
        el("section", articles, id="queue", data_live=True),
        cli(f"longcall ops list --state reconciliation_required{view.cli_ledger}"),
    ]
    return layout("Reconciliation queue", view, body, counts=counts)


_LOOKUP_EVENTS = ("SubmitOutcomeLost", "SubmissionFound", "SubmissionNeverCreated",
                  "OperationNotFound", "ReconciliationEscalated", "RequestFailed")  # fmt: skip


def reconcile_form(ledger: Ledger, record: OperationRecord, view: View) -> Html:
    """The evidence, and a form offering only the resolutions it allows."""
    node = record.call_node_id
    history = ledger.history(node)
    created = history[0].at_utc if history else "—"
    lookups = [h for h in history if h.event in _LOOKUP_EVENTS]
    evidence: list[tuple[str, Child]] = [
        ("why", record.reconciliation_reason or "—"),
        ("create sent", f"first at {created}; {record.submit_attempts} attempt(s)"),
        (
            "lookup by submission key",
            "supported" if record.submission_lookup else "not offered by the server",
        ),
        (
            "lookups and answers",
            join(el("div", f"{h.at_utc}: {h.event} → {h.state.value}") for h in lookups) or "none",
        ),
        ("remote operation id", record.operation_id or "none recorded"),
        (
            "last server status",
            record.server_status_raw
            or (record.server_status.value if record.server_status else "—"),
        ),
        ("last status message", record.status_message or "—"),
        ("last error", record.last_error or "—"),
        (
            "tool marked idempotent",
            "yes: resubmitting cannot repeat a side effect"
            if record.tool_idempotent
            else "no: resubmitting may repeat its side effect",
        ),
    ]
    allowed = resolutions(record, now=view.now)
    choices = [
        el(
            "label",
            el("input", type="radio", name="resolution", value=r.value, required=True),
            f" {r.value} — {_RESOLUTION_WORDS[r]}",
            class_="choice",
        )
        for r in allowed
    ]
    return join(
        [
            table(("evidence", ""), evidence, class_="evidence"),
            el(
                "form",
                hidden(node=node, version=record.version, action_id=view.new_action()),
                el("fieldset", el("legend", "What you found out"), choices),
                el(
                    "label",
                    "reason (kept in the record and the receipt)",
                    el("input", name="note", required=True, autocomplete="off"),
                ),
                el(
                    "label",
                    "operator",
                    el("input", name="actor", required=True, value=view_actor()),
                ),
                el(
                    "label",
                    "result JSON (completed / failed / cancelled; optional)",
                    el("textarea", "", name="result_json", rows="3"),
                ),
                el("button", "Resolve", type="submit"),
                cli(
                    f"longcall ops reconcile {quoted(node)}"
                    f" --as {'|'.join(r.value for r in allowed)}"
                    f" --note WHY --actor NAME{view.cli_ledger}"
                ),
                method="post",
                action="/act/reconcile",
                class_="action reconcile",
            ),
        ]
    )


_RESOLUTION_WORDS = {
    Resolution.RESUME: "the server still knows it: poll it again",
    Resolution.NEVER_CREATED: "the server never created it: resubmit with the same key",
    Resolution.COMPLETED: "it completed (give the result if you have it)",
    Resolution.FAILED: "it failed",
    Resolution.CANCELLED: "it was cancelled",
}


def view_actor() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


# --- servers and workers ---------------------------------------------------------------


def servers(ledger: Ledger, view: View) -> Html:
    counts = ledger.count_by_state()
    use_rows = [
        (u.server, u.protocol or "—", u.adapter_version or "—", u.operations, u.open, u.failing)
        for u in ledger.server_use()
    ]
    holdings = {h.owner: h for h in ledger.holdings()}
    worker_rows = [_worker_row(w, holdings.get(w.owner), view.now) for w in ledger.workers()]
    plan_rows = [
        (
            p.protocol,
            p.adapter_version,
            p.state,
            f"{p.canary_percent:g} %",
            p.note,
            p.updated_at_utc,
        )
        for p in ledger.rollout_plan()
    ]
    body: list[Child] = [
        el(
            "section",
            el("h2", "Servers"),
            table(
                (
                    "server",
                    "protocol version",
                    "adapter version",
                    "operations",
                    "open",
                    "retrying now",
                ),
                use_rows,
                class_="servers",
            ),
            id="servers",
            data_live=True,
        ),
        el(
            "section",
            el("h2", "Poll budgets and circuit breakers"),
            _budgets_and_breakers(ledger, view.now),
            el(
                "p",
                "Every worker draws its polls of a server from one budget in the ledger, at"
                " most its --qps a second (20 by default; a servers file sets it per server)."
                " The cap shown is the one the last grant was taken at; slots are what the"
                " workers took from the budget, an upper bound on the polls sent (a slot a"
                " worker could not use in time is dropped). Each worker keeps a circuit"
                " breaker per server and records it here when it opens or closes.",
                class_="quiet",
            ),
            id="budgets",
            data_live=True,
        ),
        el(
            "section",
            el("h2", "Workers and leases"),
            table(WORKER_HEAD, worker_rows, class_="workers")
            if worker_rows
            else el("p", "No worker is registered.", class_="quiet"),
            id="workers",
            data_live=True,
        ),
        el(
            "section",
            el("h2", "Rollout plan"),
            table(
                ("protocol", "adapter version", "state", "canary", "note", "changed"),
                plan_rows,
                class_="plan",
            )
            if plan_rows
            else el(
                "p",
                "No rollout plan: new calls use the version each adapter offers.",
                class_="quiet",
            ),
            cli(f"longcall rollout status{view.cli_ledger}"),
            id="plan",
        ),
    ]
    return layout("Servers & workers", view, body, counts=counts)


WORKER_HEAD = ("holder", "kind", "lease", "renewed", "started", "operations held",
               "held at epoch 2 or more (taken over)")  # fmt: skip


def _worker_row(worker: WorkerRow, holding: Holding | None, now: float) -> list[Child]:
    live = worker.lease_until > now
    lease = (
        f"until {stamp(worker.lease_until)}"
        if live
        else f"lapsed {relative(worker.lease_until, now)}"
    )
    held = holding.operations if holding else 0
    if holding is None or holding.epoch_max is None:
        epochs = "none"
    else:
        epochs = f"{holding.taken_over}, at epochs up to {holding.epoch_max}"
    return [worker.owner, worker.kind, el("span", lease, class_="live-lease" if live else "lapsed"),
            worker.renewed_at_utc, worker.started_at_utc, held, epochs]  # fmt: skip


def _budgets_and_breakers(ledger: Ledger, now: float) -> Html:
    budgets = {b.server: b for b in ledger.poll_budgets()}
    live = live_owners(ledger, now)
    breakers: dict[str, list[BreakerRow]] = {}
    for breaker in ledger.breakers():
        breakers.setdefault(breaker.server, []).append(breaker)
    names = sorted({*(u.server for u in ledger.server_use()), *budgets, *breakers})
    if not names:
        return el("p", "No server yet.", class_="quiet")
    rows = [
        (
            name,
            *_budget_cells(budgets.get(name), now),
            join(_breaker_line(b, live, now) for b in breakers.get(name, []))
            or "none recorded (closed)",
        )
        for name in names
    ]
    return table(
        ("server", "poll cap", "slots taken, last whole minute", "this minute", "circuit breakers"),
        rows,
        class_="budgets",
    )


def _budget_cells(budget: PollBudgetRow | None, now: float) -> tuple[Child, Child, Child]:
    if budget is None or budget.qps_max is None:
        return "no shared budget drawn yet", "—", "—"
    last, this = budget.use.seen_at(now)
    per_minute = slots_per_minute_max(budget.qps_max)
    cap = f"{budget.qps_max:g}/s (at most {per_minute:.0f} slots a minute)"
    used = f"{last} ({100 * last / per_minute:.0f} % of the cap)"
    return cap, used, this


def _breaker_line(breaker: BreakerRow, live: set[str], now: float) -> Html:
    if breaker.state is BreakerState.OPEN:
        text = (
            f"{breaker.owner}: {breaker_until(breaker, now)}, {breaker.failures} failures in a"
            f" row; last error: {breaker.last_error or 'unknown'}"
        )
    else:
        text = f"{breaker.owner}: {breaker.state.value} since {breaker.changed_at_utc}"
    if breaker.owner not in live:
        text += " (its lease has lapsed)"
    return el("div", text, class_=f"breaker b-{breaker.state.value}")


def refused(title: str, message: str) -> Html:
    """A bare page for a refused request (no layout: nothing of the ledger is shown)."""
    return Html(
        "<!doctype html>"
        + el(
            "html",
            el("head", el("meta", charset="utf-8"), el("title", title)),
            el("body", el("h1", title), el("p", message)),
            lang="en",
        )
    )


def flash(ok: bool, message: str, cli_line: str) -> Html:
    return el(
        "div",
        el("strong", "Done: " if ok else "Refused: "),
        el("span", message, class_="message"),
        cli(cli_line),
        class_="flash ok" if ok else "flash refused",
        id="flash",
        role="status",
    )


def now_s() -> float:
    return time.time()


def as_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
