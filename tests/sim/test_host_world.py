"""The host world: task-unaware hosts through the gateway's real host-call decisions, the
gateway's calls on the simulator's real engine; its gates hold and can fail."""

from __future__ import annotations

import random

from click.testing import CliRunner

from longcall.cli import main
from longcall.gateway.hostcalls import GatewayOptions
from longcall.sim import derive_seed
from longcall.sim.hostworld import Chain, HostWorld, run_host, run_hosts
from longcall.sim.mutants import catch, mutant

WORLDS = 200


def test_host_worlds_start_no_second_run_and_give_each_chain_one_outcome() -> None:
    """Over 200 seeded host worlds every gate holds, and each case the gates are about
    happened: retries attached to running and to ended calls, handles, status calls,
    lost answers, timeouts, disconnects, gateway crashes, deliberate repeats."""
    report = run_hosts(WORLDS, seed=0)
    assert report.failures == []
    assert report.ok, [g for g in report.gate_list() if not g.holds]
    counts = report.counts()
    for name in (
        "attached_open",
        "attached_ended",
        "handles_given",
        "status_calls",
        "answers_lost",
        "host_timeouts",
        "disconnects",
        "gateway_crashes",
        "deliberate_repeats",
    ):
        assert counts[name] > 0, name
    assert report.outcomes_delivered == report.chains
    assert report.upstream_runs < report.host_requests


def test_a_grace_shorter_than_a_host_timeout_is_caught() -> None:
    """The gates can fail: with a 30 s grace, a host that waits out a 60 s or 240 s
    timeout after a lost outcome runs the tool again, and the gates see it."""
    short = GatewayOptions(repeat_grace_s=30.0)
    failing = None
    for index in range(100):
        result = run_host(derive_seed(0, index), options=short)
        if result.violations:
            failing = result
            break
    assert failing is not None
    checks = {v.check for v in failing.violations}
    assert "duplicate upstream executions" in checks


def test_a_deliberate_repeat_after_the_grace_runs_again() -> None:
    """The same call made long after its outcome was given is a new run, with its own
    outcome; made while the first runs, it attaches."""
    world = HostWorld(random.Random(7), seed=7, options=GatewayOptions(repeat_grace_s=300.0))
    world.loss, world.disconnect, world.downs = 0.0, 0.0, []
    world.config.crash_on_action = world.config.race_at = None
    server = world.config.servers[0].name

    def chain(index: int, start_at: float) -> Chain:
        return Chain(
            index=index,
            principal="alice",
            tool=f"{server}_report",
            server=server,
            arguments={"query": "same"},
            start_at=start_at,
            timeout_s=60.0,
            backoff_s=1.0,
        )

    world.chains = [chain(0, 0.0), chain(1, 0.5), chain(2, 1_500.0)]
    world.host.chains = len(world.chains)
    result = world.run_host()
    assert result.violations == []
    first, retry, later = (c.outcomes[0][1] for c in world.chains)
    assert first == retry != later
    assert result.upstream_runs == 2
    assert result.deliberate_repeats == 1


def test_a_seed_replays_the_same_host_world() -> None:
    """One seed, one host world: the trace is the same line for line."""
    seed = derive_seed(0, 3)
    first = run_host(seed, trace=True)
    again = run_host(seed, trace=True)
    assert first.trace == again.trace
    assert first.trace


def test_the_gates_catch_a_same_call_rule_that_never_attaches() -> None:
    """Planted in the real rule: a retry of a running call starts a second upstream run."""
    found = catch(mutant("same-call-never-attaches"), permutations=50)
    assert found.check == "duplicate upstream executions", found


def test_the_gates_catch_a_same_call_rule_that_ignores_the_principal() -> None:
    """Planted in the real derivation: one principal gets another's outcome."""
    found = catch(mutant("same-call-ignores-principal"), permutations=100)
    assert found.check == "one outcome per host call chain", found
    assert "another principal" in found.detail


def test_cli_runs_and_replays_the_host_world() -> None:
    """`longcall sim --world host` judges its gates; --replay prints one world's trace."""
    runner = CliRunner()
    result = runner.invoke(main, ["sim", "--world", "host", "--permutations", "4", "--json"])
    assert result.exit_code == 0, result.output
    assert '"world": "host"' in result.output
    replayed = runner.invoke(main, ["sim", "--world", "host", "--replay", str(derive_seed(0, 1))])
    assert replayed.exit_code == 0, replayed.output
    assert "gateway" in replayed.output
    assert replayed.output.rstrip().endswith("verdict: ok")
    refused = runner.invoke(main, ["sim", "--world", "moon"])
    assert refused.exit_code == 2
    assert "unknown world" in refused.output


def test_a_retry_a_gateway_outage_pushed_past_the_grace_still_attaches() -> None:
    """An outcome given at 290.7 s and lost on its way, the host's 240 s timeout, then
    the gateway down from 522 s to 600 s when the retry comes due: the retry reaches it
    at 631 s, past the grace in wall time, but the restart recorded the downtime and the
    rule counts only uptime, so the retry attaches and the tool does not run again."""
    result = run_host(8507569210774, trace=True)
    assert result.violations == []
    # Two crashes, each from the last heartbeat before it to the restart.
    assert result.downtime_s == round(441.505 - 370) + round(600.249 - 521.505)
    assert result.trace is not None
    assert any("down 521.505–600.249 s, recorded" in line for line in result.trace)
    assert any("chain 1 -> lc-me1v-5p32r joined=True" in line for line in result.trace)
    chain_starts = [line for line in result.trace if "joined=False" in line]
    assert len(chain_starts) == result.upstream_runs


def test_without_the_downtime_the_same_retry_runs_the_tool_again() -> None:
    """The gate is what catches it: a gateway that records no downtime (its lease row
    gone at the crash, as if it had never run) runs seed 8507569210774 twice."""

    class Forgetful(HostWorld):
        def _last_heartbeat(self) -> None:
            self.ledger.retire_worker(self.gateway_owner)

    seed = 8507569210774
    world = Forgetful(random.Random(seed), seed=seed)
    result = world.run_host()
    assert result.downtime_s == 0
    assert "duplicate upstream executions" in {v.check for v in result.violations}
