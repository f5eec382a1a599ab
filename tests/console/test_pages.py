"""The console in headless Chromium over a ledger holding every local state: the list
and its filters, an operation's banner and timeline, hostile status messages kept as
text, the token and Origin guards, a reconciliation resolved from the page, a cancel,
and a double-sent action that writes once. Screenshots of every page are saved."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from tests.console.conftest import Shots, running_console
from tests.ledger.test_leases import claimed

from longcall.cli.console import console as cli_console
from longcall.console import Console
from longcall.console.pages import utc_stamp
from longcall.console.waiting import stamp
from longcall.core import State, handle
from longcall.core import events as e
from longcall.core.retry import BreakerState
from longcall.ledger import WORKER, BreakerRow, Fenced, SQLiteLedger
from longcall.ledger.budget import grant_size_max
from longcall.runtime.step import commit
from longcall.testing.sample import HOSTILE, KINDS, fill, fill_many

pytestmark = pytest.mark.slow

WAIT_MS = 30_000
TERMINAL_KINDS = ("accepted_ok", "accepted_empty", "tool_error", "protocol_error", "cancelled")
OPEN_KINDS = [k for k in KINDS if k not in TERMINAL_KINDS]


SERVER = "http://127.0.0.1:9/mcp"
"""The server every operation of the sample names."""
BUDGET_QPS = 5.0


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """A ledger with every sample kind, normal and hostile, one worker holding most; and
    what workers leave beside them: a takeover with the stale holder's refused write, an
    open breaker, a poll budget drawn on."""
    path = tmp_path / "ledger.db"
    now = time.time()
    two_hours_ago = utc_stamp(now - 7_200)  # the ledger's own stamps, as if then
    with SQLiteLedger(path, utc_now=lambda: two_hours_ago) as ledger:
        fill(ledger, now=now - 7_200, worker="worker-1")
    with SQLiteLedger(path) as ledger:
        fill(ledger, now=now - 60, prefix="evil-", hostile=True)
        _take_over_with_a_refused_write(ledger, "evil-submitting", now=now)
        ledger.put_breaker(
            BreakerRow(server=SERVER, owner="worker-2", state=BreakerState.OPEN,
                       open_until=now + 600.0, failures=5,
                       last_error=f"poll: unavailable — 503 {HOSTILE}")
        )  # fmt: skip
        ledger.take_poll_slots(SERVER, now=now, count=3, qps_max=BUDGET_QPS)
    return path


def _take_over_with_a_refused_write(ledger: SQLiteLedger, node: str, *, now: float) -> None:
    """worker-0 claims ``node`` and its lease lapses; worker-2 takes it over (epoch 2);
    worker-0 then writes what it decided before, and the ledger refuses it."""
    ledger.register_worker("worker-0", kind=WORKER, now=now - 100.0, lease_s=10.0)
    (held,) = ledger.claim("worker-0", now=now - 100.0, limit=1, decide=claimed, nodes=[node])
    ledger.register_worker("worker-2", kind=WORKER, now=now, lease_s=86_400.0)
    ledger.claim("worker-2", now=now, limit=1, decide=claimed, nodes=[node])
    lost = handle(held.record, e.SubmitOutcomeLost(reason="timeout"), now=now - 50.0, jitter=0.5)
    with pytest.raises(Fenced):
        commit(ledger, held.record, lost, event="SubmitOutcomeLost", owner="worker-0")


@pytest.fixture
def console(ledger_path: Path) -> Iterator[Console]:
    """The console over that ledger."""
    with running_console(f"sqlite:///{ledger_path}") as served:
        yield served


@pytest.fixture
def page(browser: Any, console: Console) -> Iterator[Any]:
    """A browser tab that opened the printed address (so it holds the cookie)."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(WAIT_MS)
    tab.goto(console.url)
    assert "token" not in tab.url  # the token leaves the address bar at once
    try:
        yield tab
    finally:
        context.close()


def base(console: Console) -> str:
    return f"http://127.0.0.1:{console.port}"


def column(tab: Any, index: int) -> list[str]:
    return [
        c.strip()
        for c in tab.locator(f"#ops-table tbody tr td:nth-child({index})").all_inner_texts()
    ]


def figure(tab: Any, name: str) -> str:
    """The text of one health figure on the home page."""
    term = tab.locator("#health dt", has_text=name)
    return str(term.locator("xpath=following-sibling::dd[1]").inner_text()).strip()


def test_home_puts_what_needs_a_person_first(page: Any, console: Console, shots: Shots) -> None:
    """Home: the input requests, the reconciliation queue and the open breakers first,
    counts per state, the health figures as the sample makes them; the list is one link
    away."""
    needs = page.locator("#needs")
    assert "Input requests (2)" in needs.inner_text()
    assert needs.locator("a.node", has_text="input_required").count() == 2
    assert "Reconciliation queue" in needs.inner_text()
    assert "Servers whose requests fail now" in needs.inner_text()
    breakers = needs.locator("table.breakers-open tbody tr")
    assert "Open circuit breakers (1)" in needs.inner_text()
    assert breakers.count() == 1
    (row,) = breakers.all_inner_texts()
    assert SERVER in row
    assert "worker-2" in row
    assert re.search(r"open until .* \(in (9|10) min", row)
    assert f"503 {HOSTILE}" in row
    states = page.locator("#states").inner_text()
    for state in State:
        assert state.value in states
    assert figure(page, "completion rate").startswith("4 of 8 accepted completed ok")
    assert "outcome UNKNOWN" in page.locator("#health").inner_text()
    # Every accepted sample took seven steps of 1.5 s; its cancel was acknowledged one
    # step after it was asked.
    assert figure(page, "median duration") == "10.5 s"
    assert figure(page, "median cancel latency") == "1.5 s"
    assert figure(page, "recoveries") == "1"  # evil-submitting, taken over at epoch 2
    # One failed poll within the hour (the evil retrying sample); the other is older.
    assert figure(page, "retried requests per server") == f"{SERVER}: 1 retried, 0 given up"
    shots.take(page, "home")
    page.click("text=/All \\d+ operations/")
    assert page.url.endswith("/operations")


def test_list_shows_every_state_and_its_filters_work(
    page: Any, console: Console, shots: Shots
) -> None:
    """Every local state is listed (the demo's among them); state, waiting-on, tool,
    server status and search filters narrow the list as they say."""
    page.goto(f"{base(console)}/operations")
    assert set(column(page, 2)) == {s.value for s in State}
    assert len(column(page, 1)) == 2 * len(KINDS)
    shots.take(page, "operations")
    page.select_option("#f-state", "input_required")
    page.click("form.filters button")
    page.wait_for_url(re.compile(r"state=input_required"))
    assert column(page, 1) == ["evil-input_required", "input_required"]
    page.goto(f"{base(console)}/operations?waiting=operator")
    assert sorted(column(page, 1)) == sorted(
        ["reconcile_lost", "reconcile_unsent", "evil-reconcile_lost", "evil-reconcile_unsent"]
    )
    page.goto(f"{base(console)}/operations?waiting=worker")
    assert "evil-working" in column(page, 1)
    assert "working" not in column(page, 1)
    page.goto(f"{base(console)}/operations?tool=deploy&status=")
    assert sorted(column(page, 1)) == ["evil-reconcile_unsent", "reconcile_unsent"]
    page.goto(f"{base(console)}/operations?status=failed")
    assert sorted(column(page, 1)) == sorted(
        ["tool_error", "protocol_error", "evil-tool_error", "evil-protocol_error"]
    )
    page.goto(f"{base(console)}/operations")
    page.fill("#f-q", "task-evil-working")
    page.click("form.filters button")
    page.wait_for_url(re.compile(r"q=task-evil-working"))
    assert column(page, 1) == ["evil-working"]
    page.goto(f"{base(console)}/operations?age=gt1h")
    assert len(column(page, 1)) == len(KINDS)
    assert "evil-working" not in column(page, 1)
    page.click("#ops-table a.node >> nth=0")
    assert "/op/" in page.url


def test_every_open_operation_has_a_banner_and_a_timeline(
    page: Any, console: Console, shots: Shots
) -> None:
    """Each non-terminal sample shows a typed "waiting on" banner; the timeline folds
    repeated polls into one row; the identity names epoch and cancel generation."""
    reasons = {}
    for kind in OPEN_KINDS:
        page.goto(f"{base(console)}/op/{kind}")
        banner = page.locator("#banner")
        assert banner.inner_text().startswith("Waiting on"), kind
        reasons[kind] = banner.get_attribute("data-reason")
    assert reasons["input_required"] == "person"
    assert reasons["reconcile_lost"] == reasons["reconcile_unsent"] == "operator"
    assert reasons["submitting"] == "worker"
    assert reasons["retrying"] == "backoff"
    assert reasons["working"] == "server"
    page.goto(f"{base(console)}/op/working")
    timeline = page.locator("#timeline").inner_text()
    assert "WorkingObserved ×3" in timeline
    identity = page.locator("#identity").inner_text()
    assert "execution epoch" in identity
    assert "cancel generation" in identity
    assert "worker-1" in identity
    assert "next at" in page.locator("#banner").inner_text()
    shots.take(page, "operation")
    page.goto(f"{base(console)}/op/input_required")
    assert "waiting for a person" in page.locator(".clocks").inner_text()


def test_a_server_wait_tells_the_last_and_next_poll(
    page: Any, console: Console, ledger_path: Path
) -> None:
    """An operation polling its server shows its last status, when the status was last
    read (the last poll's answer) and when the next poll is due."""
    page.goto(f"{base(console)}/op/working")
    banner = page.locator("#banner").inner_text()
    with SQLiteLedger(ledger_path) as ledger:
        record = ledger.get("working")
        last_poll = [h for h in ledger.history("working") if h.event == "WorkingObserved"][-1]
    assert "last status: working — working at the server" in banner
    assert f"last status read at {stamp(last_poll.at)}" in banner
    assert f"{record.poll_count} poll(s) so far" in banner
    assert f"next poll at {stamp(record.next_poll_at)}" in banner
    assert "circuit breaker" not in banner  # its holder, worker-1, has none open


def test_an_open_breaker_and_a_refused_write_are_shown(
    page: Any, console: Console, shots: Shots
) -> None:
    """An operation held by a worker whose breaker for its server is open says so in its
    banner (until when, the last error, as text); its timeline shows the takeover with
    each holder's epoch and the stale holder's refused write in its place."""
    page.goto(f"{base(console)}/op/evil-submitting")
    banner = page.locator("#banner")
    assert banner.get_attribute("data-reason") == "server"
    text = banner.inner_text()
    assert "its circuit breaker is open" in text
    assert "circuit breaker of worker-2 for this server: open until" in text
    assert f"last error: poll: unavailable — 503 {HOSTILE}" in text
    assert page.evaluate("window.__pwned") is None
    rows = [
        [c.strip() for c in r.split("\t")]
        for r in page.locator("#timeline tbody tr").all_inner_texts()
    ]
    claims = [(r[3], r[4]) for r in rows if r[1] == "ExecutionClaimed"]
    assert claims == [("worker-0", "1"), ("worker-2", "2")]
    (refused,) = page.locator("#timeline tr.refused").all_inner_texts()
    assert "SubmitOutcomeLost (not written)" in refused
    assert "refused: another worker holds it at a newer epoch" in refused
    assert "worker-0\t1" in refused
    events = [r[1] for r in rows]
    assert events.index("SubmitOutcomeLost (not written)") > events.index("ExecutionClaimed")
    shots.take(page, "operation-refused-write")


def test_receipts_keep_tool_and_protocol_errors_apart(
    page: Any, console: Console, shots: Shots
) -> None:
    """A tool error and a protocol error are told apart; zero items are warned about;
    the result is paged; the outbox row is shown."""
    page.goto(f"{base(console)}/op/tool_error")
    assert page.locator(".tool-error").count() == 1
    assert page.locator(".protocol-error").count() == 0
    page.goto(f"{base(console)}/op/protocol_error")
    assert page.locator(".protocol-error").count() == 1
    assert page.locator(".tool-error").count() == 0
    page.goto(f"{base(console)}/op/accepted_empty")
    assert page.locator(".zero-items").count() == 1
    page.goto(f"{base(console)}/op/accepted_ok")
    assert "outbox row" in page.locator("#receipt").inner_text()
    assert "result page 1 of 2" in page.locator("#receipt").inner_text()
    shots.take(page, "receipt")
    page.click("#receipt a[rel=next]")
    assert "result page 2 of 2" in page.locator("#receipt").inner_text()


def test_hostile_status_messages_stay_text(page: Any, console: Console) -> None:
    """A status message, error, reason and question holding <script> and <img onerror>
    are shown as their characters on every page, and never run; no page holds the
    token."""
    for path in ("/", "/operations", "/op/evil-working", "/op/evil-retrying",
                 "/op/evil-tool_error", "/op/evil-submitting", "/inbox", "/reconcile",
                 "/servers"):  # fmt: skip
        page.goto(base(console) + path)
        assert console.token not in page.content(), path  # no credential in a page
        assert page.evaluate("window.__pwned") is None, path
        assert page.locator("img").count() == 0, path
        assert page.locator("body script").count() == 0, path
    page.goto(f"{base(console)}/op/evil-working")
    assert HOSTILE in page.locator("#banner").inner_text()
    page.goto(f"{base(console)}/inbox")
    assert f"Approve this change? {HOSTILE}" in page.locator("#q-evil-input_required").inner_text()


def test_no_token_no_page_and_no_write_from_another_origin(
    page: Any, console: Console, ledger_path: Path, tmp_path: Path
) -> None:
    """Without the token or its cookie nothing is served; a wrong Host is refused; a
    write from another origin is refused even with the cookie and a real action id,
    and writes nothing; every answer carries the CSP."""
    with httpx.Client(base_url=base(console)) as bare:
        for path in ("/", "/operations", "/op/working", "/static/console.js"):
            response = bare.get(path)
            assert response.status_code == 403
            assert "working" not in response.text
        assert bare.get("/?token=wrong").status_code == 403
        posted = bare.post("/act/cancel", data={"node": "working", "version": "5"})
        assert posted.status_code == 403
        rebound = bare.get(
            f"/?token={console.token}", headers={"host": f"evil.example:{console.port}"}
        )
        assert rebound.status_code == 421
    page.goto(f"{base(console)}/op/working")
    assert (
        "default-src 'none'"
        in (page.request.get(f"{base(console)}/").headers["content-security-policy"])
    )
    action_id = page.locator("form.cancel input[name=action_id]").get_attribute("value")
    generation = page.locator("form.cancel input[name=cancel_generation]").get_attribute("value")
    # Another site (another port of 127.0.0.1 is the same site, so the cookie goes
    # along) posts the console's own form, with a real action id.
    attacker = tmp_path / "attack.html"
    attacker.write_text(
        f'<form id=f method=post action="{base(console)}/act/cancel">'
        f"<input name=node value=working><input name=state value=working>"
        f'<input name=cancel_generation value="{generation}">'
        f'<input name=action_id value="{action_id}"></form>'
    )
    with _static_site(tmp_path) as site:
        page.goto(f"{site}/attack.html")
        with page.expect_response(f"{base(console)}/act/cancel") as answer:
            page.evaluate("document.getElementById('f').submit()")
        assert answer.value.status == 403
        assert "Cross-site request refused" in answer.value.text()
    with SQLiteLedger(ledger_path) as ledger:
        record = ledger.get("working")
        assert record.state is State.WORKING
        assert str(record.cancel_generation) == generation
        assert "CancelRequested" not in [h.event for h in ledger.history("working")]


def test_a_reconciliation_from_the_page_ends_with_one_receipt(
    page: Any, console: Console, ledger_path: Path, shots: Shots
) -> None:
    """The queue offers only what the evidence allows (resume with a task id, resubmit
    without one); settling as completed writes one receipt naming the operator; the
    same stale form again is refused and writes nothing."""
    page.goto(f"{base(console)}/reconcile")
    lost = page.locator("#r-reconcile_lost")
    unsent = page.locator("#r-reconcile_unsent")
    assert lost.locator("input[value=resume]").count() == 1
    assert lost.locator("input[value=never_created]").count() == 0
    assert unsent.locator("input[value=never_created]").count() == 1
    assert unsent.locator("input[value=resume]").count() == 0
    assert "resubmitting may repeat its side effect" in unsent.inner_text()
    shots.take(page, "reconcile")
    form = lost.locator("form")
    form.locator("input[value=completed]").check()
    form.locator("input[name=note]").fill("the server's log shows it finished")
    form.locator("input[name=actor]").fill("ops-alice")
    form.locator("textarea[name=result_json]").fill('{"rows": 3}')
    stale = {
        "node": "reconcile_lost",
        "version": form.locator("input[name=version]").get_attribute("value"),
        "resolution": "failed",
        "note": "a second look",
        "actor": "ops-bob",
    }
    form.locator("button").click()
    page.wait_for_selector("#flash")
    assert "Done" in page.locator("#flash").inner_text()
    assert (
        "longcall ops reconcile reconcile_lost --as completed"
        in page.locator("#flash").inner_text()
    )
    assert page.locator("#banner").inner_text().startswith("Accepted")
    # The same form sent again later (another action id, the old row version).
    again = page.request.post(
        f"{base(console)}/act/reconcile",
        form=dict(stale, action_id=console.new_action()),
        headers={"origin": base(console)},
    )
    assert "changed since this page was drawn" in again.text()
    with SQLiteLedger(ledger_path) as ledger:
        receipts = [r for r in ledger.receipts() if r.call_node_id == "reconcile_lost"]
        assert len(receipts) == 1
        assert receipts[0].resolved_by == "ops-alice: the server's log shows it finished"
        assert ledger.outbox_of("reconcile_lost") is not None
        assert ledger.result_payload("reconcile_lost") == b'{"rows":3}'


def test_a_stale_form_and_a_repeated_action_write_nothing(
    page: Any, console: Console, ledger_path: Path
) -> None:
    """An action id sent twice does one thing; a form drawn before the cancel generation
    moved on is refused (compare-and-set) and says what changed."""
    page.goto(f"{base(console)}/op/working")
    cancel = page.locator("form.cancel")
    form = {
        "node": "working",
        "state": cancel.locator("input[name=state]").get_attribute("value"),
        "cancel_generation": cancel.locator("input[name=cancel_generation]").get_attribute("value"),
        "action_id": page.locator("form.cancel input[name=action_id]").get_attribute("value"),
    }
    headers = {"origin": base(console)}
    first = page.request.post(f"{base(console)}/act/cancel", form=form, headers=headers)
    second = page.request.post(f"{base(console)}/act/cancel", form=form, headers=headers)
    assert first.ok
    assert second.ok
    assert first.url == second.url
    assert "requested (generation 1)" in second.text()
    with SQLiteLedger(ledger_path) as ledger:
        history = ledger.history("working")
    assert [h.event for h in history].count("CancelRequested") == 1
    again = dict(form, action_id=console.new_action())  # the same form, drawn again
    stale = page.request.post(f"{base(console)}/act/cancel", form=again, headers=headers)
    assert "changed since this page was drawn" in stale.text()
    with SQLiteLedger(ledger_path) as ledger:
        assert len(ledger.history("working")) == len(history)


def _bump(ledger_path: Path, node: str) -> int:
    """Commit a new version of the row that changes nothing else, as a worker's poll
    does; the new version."""
    with SQLiteLedger(ledger_path) as ledger:
        record = ledger.get(node)
        bumped = dataclasses.replace(record, version=record.version + 1)
        ledger.update(bumped, expected_version=record.version, event="PollScheduled")
        return bumped.version


def test_cancel_from_an_open_page_survives_polls(
    page: Any, console: Console, ledger_path: Path
) -> None:
    """A running operation's row moves on under an open page (each poll commits a new
    version): its Cancel button still goes through, once."""
    page.goto(f"{base(console)}/op/working")
    for _ in range(3):
        _bump(ledger_path, "working")
    page.locator("form.cancel button").click()
    page.wait_for_selector("#flash")
    assert "requested (generation 1)" in page.locator("#flash").inner_text()
    with SQLiteLedger(ledger_path) as ledger:
        assert [h.event for h in ledger.history("working")].count("CancelRequested") == 1


def test_a_reconciliation_on_a_row_changed_since_the_page_writes_nothing(
    page: Any, console: Console, ledger_path: Path
) -> None:
    """A reconciliation form whose row was changed after the page was drawn is refused,
    and nothing is written."""
    page.goto(f"{base(console)}/reconcile")
    form = page.locator("#r-reconcile_lost form")
    form.locator("input[value=failed]").check()
    form.locator("input[name=note]").fill("checked the server")
    form.locator("input[name=actor]").fill("ops-carol")
    now = _bump(ledger_path, "reconcile_lost")
    form.locator("button").click()
    page.wait_for_selector("#flash")
    assert "changed since this page was drawn" in page.locator("#flash").inner_text()
    with SQLiteLedger(ledger_path) as ledger:
        record = ledger.get("reconcile_lost")
        assert record.state is State.RECONCILIATION_REQUIRED
        assert record.version == now
        assert not [r for r in ledger.receipts() if r.call_node_id == "reconcile_lost"]


def test_a_wildcard_bind_answers_at_the_allowed_hosts_only(ledger_path: Path) -> None:
    """Bound to every interface, the console answers (and takes writes from) the names
    given as allowed hosts and loopback; any other Host gets 421; a bad name is refused
    on the command line."""
    with running_console(
        f"sqlite:///{ledger_path}", host="0.0.0.0", allowed_hosts=("Ops.Example",)
    ) as wide:
        assert wide.url.startswith(f"http://ops.example:{wide.port}/")
        with httpx.Client(base_url=f"http://127.0.0.1:{wide.port}") as bare:
            for name, status in (("ops.example", 303), ("127.0.0.1", 303), ("evil.example", 421)):
                answer = bare.get(f"/?token={wide.token}", headers={"host": f"{name}:{wide.port}"})
                assert answer.status_code == status, name
            origin = f"http://ops.example:{wide.port}"
            bare.cookies.set(wide.cookie, wide.session)
            posted = bare.post(
                "/act/cancel",
                data={"node": "working", "state": "working", "cancel_generation": "0",
                      "action_id": wide.new_action()},
                headers={"host": f"ops.example:{wide.port}", "origin": origin},
            )  # fmt: skip
            assert posted.status_code == 303
    with SQLiteLedger(ledger_path) as ledger:
        assert ledger.get("working").cancel_generation == 1
    refused = CliRunner().invoke(
        cli_console, ["--host", "0.0.0.0", "--allowed-host", "ops.example:8790"]
    )
    assert refused.exit_code == 2
    assert "without scheme, port or path" in refused.output


def test_servers_and_workers_page(
    page: Any, console: Console, shots: Shots, ledger_path: Path
) -> None:
    """Servers with their protocol versions and failing counts; each server's poll cap
    and the slots taken from it, and the workers' breakers; workers with lease,
    operations held and their epochs; the rollout plan."""
    before = time.time()
    page.goto(f"{base(console)}/servers")
    after = time.time()
    servers = page.locator("#servers").inner_text()
    assert "2026-07-28" in servers
    assert SERVER in servers
    (budget,) = [
        [c.strip() for c in row.split("\t")]
        for row in page.locator("#budgets table.budgets tbody tr").all_inner_texts()
    ]
    assert budget[0] == SERVER
    assert budget[1] == "5/s (at most 240 slots a minute)"  # a slot every 1.25 / 5 s
    # The slots count in the minute they were taken, and in the last whole minute once
    # the next one began: as of when the page was made, between these two reads.
    with SQLiteLedger(ledger_path) as ledger:
        (use,) = [b.use for b in ledger.poll_budgets()]
    assert use.this_minute == min(3, grant_size_max(BUDGET_QPS))
    shown = (int(budget[2].split(" ", 1)[0]), int(budget[3]))
    assert shown in {use.seen_at(before), use.seen_at(after)}, (shown, use)
    assert budget[4].startswith("worker-2: open until")
    assert f"503 {HOSTILE}" in budget[4]
    workers = {
        row.split("\t")[0].strip(): [c.strip() for c in row.split("\t")]
        for row in page.locator("#workers tbody tr").all_inner_texts()
    }
    assert set(workers) == {"worker-0", "worker-1", "worker-2"}
    assert workers["worker-1"][2].startswith("until")
    assert workers["worker-0"][2].startswith("lapsed")
    assert workers["worker-0"][5:] == ["0", "none"]  # its one operation was taken over
    assert workers["worker-2"][5:] == ["1", "1, at epochs up to 2"]  # evil-submitting
    assert workers["worker-1"][6] == "none"
    assert "Rollout plan" in page.locator("#plan").inner_text()
    shots.take(page, "servers")


MANY = 240
"""Operations of the paging test: four servers, 60 each, more than one page of each."""


def test_the_server_filter_and_paging_in_the_browser(
    browser: Any, tmp_path: Path, shots: Shots
) -> None:
    """Filtering by server (typed in the form) lists only that server's operations,
    newest first, fifty a page; following "next page" to the end shows each exactly
    once; "first page" goes back; a state filter narrows the same server further."""
    path = tmp_path / "many.db"
    with SQLiteLedger(path, synchronous="off") as ledger:
        for _done in fill_many(ledger, MANY, now=time.time() - 600):
            pass
    server = "http://127.0.0.1:9001/mcp"
    # fill_many's rule: operation i goes to port 9000 + i % 4, and is of KINDS[i % 16].
    mine = [i for i in range(MANY) if i % 4 == 1]
    expected = [f"bulk-{i:06d}-{KINDS[i % len(KINDS)]}" for i in reversed(mine)]
    with running_console(f"sqlite:///{path}") as served:
        context = browser.new_context(viewport={"width": 1360, "height": 900})
        tab = context.new_page()
        tab.set_default_timeout(WAIT_MS)
        try:
            tab.goto(served.url)
            tab.click("text=/All \\d+ operations/")
            tab.fill("#f-server", server)
            tab.click("form.filters button")
            tab.wait_for_url(re.compile(r"server=http"))
            seen: list[str] = []
            pages = 0
            while True:
                pages += 1
                assert set(column(tab, 6)) == {server}
                seen += column(tab, 1)
                following = tab.locator("nav.pager a[rel=next]")
                if following.count() == 0:
                    break
                if pages == 1:
                    shots.take(tab, "operations-server-filter")
                following.click()
                tab.wait_for_url(re.compile(r"after=\d+"))
            assert seen == expected
            assert pages == 2
            assert len(column(tab, 1)) == len(expected) - 50
            tab.click("text=← first page")
            tab.wait_for_url(lambda u: "after=" not in u)
            assert column(tab, 1) == expected[:50]
            tab.select_option("#f-state", "input_required")
            tab.click("form.filters button")
            tab.wait_for_url(re.compile(r"state=input_required"))
            asking = [n for n in expected if n.endswith("-input_required")]
            assert len(asking) == len(mine) // 4
            assert column(tab, 1) == asking
        finally:
            context.close()


@contextlib.contextmanager
def _static_site(folder: Path) -> Iterator[str]:
    """Another origin on 127.0.0.1 serving ``folder``."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_ledger_address_is_shown_without_its_secrets() -> None:
    """A page (and its CLI lines) shows the ledger URL without any password, in the
    address or among its options; the schema and other options stay."""
    from longcall.console import shown_ledger

    url = "postgresql://ops:s3cret@db:5432/lc?password=p2&schema=calls&sslmode=require"
    shown = shown_ledger(url)
    assert shown == "postgresql://ops@db:5432/lc?schema=calls&sslmode=require"
    assert "s3cret" not in shown
    assert "p2" not in shown
    assert shown_ledger("sqlite:////var/lib/ledger.db") == "sqlite:////var/lib/ledger.db"
