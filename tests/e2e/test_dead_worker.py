"""A SIGKILLed worker's operations are taken over at the next claim round, not its lease's end (D1).

Each ``longcall worker`` holds a ``flock`` on a lock file of its own (beside a SQLite
ledger; for PostgreSQL in a private directory of this host named by the ledger's
identity), which the kernel drops when the process dies. The leases here are 300 s,
longer than any wait of the test, so a takeover can only come from that proof; the
taking worker says why in its log. A worker that is only stopped (SIGSTOP) still holds
its lock, and is never proven dead.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.e2e.conftest import serve
from tests.ledger.conftest import pg_schema

from longcall.ledger import WORKER, Ledger, SQLiteLedger
from longcall.ledger.postgres import PostgresLedger
from longcall.runtime.claims import Claims, worker_locks
from longcall.runtime.engine import CallSpec
from longcall.runtime.executor import Executor, new_owner_id
from longcall.runtime.leases import LeasePolicy
from longcall.runtime.step import LedgerShell
from longcall.server import build_reference_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LEASE_S = 300.0
"""Longer than every wait here: a takeover within them is the proof's, never the lease's."""
OPERATIONS = 4
GONE_NOTE = "is gone (its lock was free)"


def _server(tmp_path: Path) -> contextlib.AbstractAsyncContextManager[str]:
    """The reference server over real HTTP, its task store beside the test's files."""
    return serve(build_reference_server(store=f"sqlite:///{tmp_path / 'tasks.db'}").asgi_app())


async def _seed(ledger: Ledger, url: str) -> None:
    """Open operations that stay open for the whole test (an hour-long tool call)."""
    seeder = Executor(ledger, single_process=True)
    binding = await seeder.bind(url, "sleep_report")
    for i in range(OPERATIONS):
        spec = CallSpec(
            call_node_id=f"op-{i}", binding=binding, arguments={"seconds": 3600, "rows": 1}
        )
        await seeder.acall(spec)
    await seeder.aclose()


async def _worker(ledger_url: str, log: Path) -> asyncio.subprocess.Process:
    with log.open("wb") as out:
        return await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "longcall", "worker", "--ledger", ledger_url),
            *("--lease", str(LEASE_S)),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=out,
        )


async def _until(condition: Callable[[], bool], *, alive: list[asyncio.subprocess.Process]) -> None:
    """Bounded polling of a condition other processes bring about (their ledger writes)."""
    async with asyncio.timeout(LOADED_MACHINE_S):
        while not condition():
            for process in alive:
                assert process.returncode is None, "a worker exited early"
            await asyncio.sleep(0.02)


def _holders(ledger: Ledger) -> collections.Counter[str]:
    """How many open operations each lease holder holds."""
    return collections.Counter({h.owner: h.operations for h in ledger.holdings()})


def _stopped(pid: int) -> bool:
    """Whether the kernel has stopped ``pid`` (SIGSTOP is delivered asynchronously)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _workers(ledger: Ledger) -> list[str]:
    return [w.owner for w in ledger.workers() if w.kind == WORKER]


@contextlib.asynccontextmanager
async def _two_workers(
    ledger: Ledger, ledger_url: str, tmp_path: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str, asyncio.subprocess.Process, str]]:
    """Worker A holding every operation, then worker B beside it, holding none (a fair
    share of 2 each keeps A's four within its slack); both are killed on exit."""
    first = await _worker(ledger_url, tmp_path / "a.log")
    started: list[asyncio.subprocess.Process] = [first]
    try:
        await _until(
            lambda: (
                len(_workers(ledger)) == 1 and _holders(ledger)[_workers(ledger)[0]] == OPERATIONS
            ),
            alive=started,
        )
        (a_owner,) = _workers(ledger)
        second = await _worker(ledger_url, tmp_path / "b.log")
        started.append(second)
        await _until(lambda: len(_workers(ledger)) == 2, alive=started)
        (b_owner,) = [w for w in _workers(ledger) if w != a_owner]
        yield first, a_owner, second, b_owner
    finally:
        for process in started:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGCONT)
                    process.kill()
            await process.wait()


async def _killed_worker_taken_over(ledger: Ledger, ledger_url: str, tmp_path: Path) -> float:
    """SIGKILL worker A; B must hold A's operations long before A's lease ends. Returns
    the seconds from the kill to B holding them all."""
    async with _two_workers(ledger, ledger_url, tmp_path) as (first, a_owner, second, b_owner):
        assert _holders(ledger)[b_owner] == 0
        first.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        await first.wait()
        await _until(lambda: _holders(ledger)[b_owner] == OPERATIONS, alive=[second])
        took_s = time.monotonic() - killed_at
        assert _holders(ledger)[a_owner] == 0
    log = (tmp_path / "b.log").read_text()
    assert f"worker {a_owner} {GONE_NOTE}" in log, log
    print(f"SIGKILL to takeover: {took_s:.2f} s")
    return took_s


async def test_a_killed_worker_is_taken_over_at_once_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    async with _server(tmp_path) as url:
        with SQLiteLedger(path) as ledger:
            await _seed(ledger, url)
            took_s = await _killed_worker_taken_over(ledger, f"sqlite:///{path}", tmp_path)
    assert took_s < LEASE_S


@pytest.mark.postgres
async def test_a_killed_worker_is_taken_over_at_once_on_postgres(tmp_path: Path) -> None:
    async with _server(tmp_path) as url:
        with pg_schema() as (dsn, schema), PostgresLedger(dsn, schema=schema) as ledger:
            sep = "&" if "?" in dsn else "?"
            await _seed(ledger, url)
            took_s = await _killed_worker_taken_over(ledger, f"{dsn}{sep}schema={schema}", tmp_path)
    assert took_s < LEASE_S


async def test_a_stopped_worker_is_never_proven_dead(tmp_path: Path) -> None:
    """SIGSTOP: the process lives, its lock is held; a claim round ends no lease of it,
    and the running worker beside it takes nothing."""
    path = tmp_path / "ledger.db"
    async with _server(tmp_path) as url:
        with SQLiteLedger(path) as ledger:
            await _seed(ledger, url)
            async with _two_workers(ledger, f"sqlite:///{path}", tmp_path) as (
                first,
                a_owner,
                second,
                b_owner,
            ):
                first.send_signal(signal.SIGSTOP)
                await _until(lambda: _stopped(first.pid), alive=[second])
                lease_before = {w.owner: w.lease_until for w in ledger.workers()}[a_owner]
                # A claim round's proofs from this process, on the real stopped worker.
                # Nothing is written unless a death is proven: a worker stopped inside
                # a SQLite transaction keeps the file's write lock until it resumes.
                claims = Claims(
                    LedgerShell(ledger),
                    owner=new_owner_id(),
                    kind=WORKER,
                    versions=None,
                    policy=LeasePolicy.of(LEASE_S),
                    claim_all=True,
                    stats=collections.Counter(),
                    locks=worker_locks(ledger),
                )
                assert claims.locks is not None
                try:
                    assert claims.end_dead_leases(time.time()) == []
                finally:
                    claims.locks.close()
                assert {w.owner: w.lease_until for w in ledger.workers()}[a_owner] == lease_before
                assert _holders(ledger)[a_owner] == OPERATIONS
                assert _holders(ledger)[b_owner] == 0
                first.send_signal(signal.SIGCONT)
    assert GONE_NOTE not in (tmp_path / "b.log").read_text()
