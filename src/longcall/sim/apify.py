"""A simulated Apify-style MCP server on the wire: early return + poll (SPEC P4, F1).

:class:`ApifyServer` answers the real mapping (:mod:`longcall.adapters.apify.mapping`)
over JSON-RPC at MCP 2025-11-25 (the framing of :class:`~longcall.sim.mcp.McpServer`):
``initialize`` (the ``dev.longcall/submissionKey`` capability where the server offers it,
S3), ``tools/list`` (the direct Actor tool and the helpers), the start call of the
Actor tool and ``get-actor-run`` as long polls (the answer leaves when the run changes
or ``waitSecs`` ends), run views with usage ``_meta`` (``com.apify/ActorRun``),
``get-dataset-items`` page by page (a page lost on the wire, a page contradicting its
counts, a run that succeeds with zero items), ``abort-actor-run`` at once or gracefully
(ABORTING, then ABORTED; a run that ended first keeps its terminal, X5), and "Run …
not found" after the retention. Starts are deduplicated by the submission key where the
server offers it, and by the arguments where the tool is idempotent.

Must not: read a clock or draw from any generator but the world's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from longcall.adapters.apify.mapping import (
    HELPERS,
    PAGE_LIMIT_DEFAULT,
    PROTOCOL,
    RUN_META_KEY,
    SUBMISSION_KEY_META_KEY,
)
from longcall.adapters.exchange import HttpRequest
from longcall.core.keys import canonical_json, digest_json
from longcall.sim.mcp import TOOL, Call, McpServer
from longcall.sim.server import LEGACY, Hold, Served
from longcall.sim.truth import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    TERMINAL,
    VALUE,
    WORKING,
    Task,
)

STATUS = {WORKING: "RUNNING", COMPLETED: "SUCCEEDED", FAILED: "FAILED", CANCELLED: "ABORTED"}
USAGE = {"usageTotalUsd": 0.0125, "usageUsd": {"ACTOR_COMPUTE_UNITS": 0.0125}}
DATASET_PREFIX = "ds-"


def run_view(task: Task) -> dict[str, Any]:
    """The run as ``get-actor-run`` shows it (``summary`` is model text, not digested)."""
    status = STATUS[task.status if task.status != INPUT_REQUIRED else WORKING]
    if task.status == WORKING and task.cancel_graceful:
        status = "ABORTING"
    count = task.items if task.status == COMPLETED else 0
    default = {"id": f"{DATASET_PREFIX}{task.task_id}", "itemCount": count}
    return {
        "runId": task.task_id,
        "actId": TOOL,
        "status": status,
        "storages": {"datasets": {"default": default}},
        "summary": f"Run {task.task_id} is {status}",
    }


def stable(run: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in run.items() if key != "summary"}


def item_count(task: Task) -> int:
    """The items of the run's default dataset (none unless it succeeded)."""
    return task.items if task.status == COMPLETED else 0


def run_items(task: Task, window: slice = slice(None)) -> list[dict[str, Any]]:
    """The run's items, or the ``window`` of them a page shows (made for that page only)."""
    return [
        {"request": task.request, "run": task.task_id, "n": n}
        for n in range(item_count(task))[window]
    ]


class ApifyServer(McpServer):
    """One simulated Apify-style MCP server (direct Actor tool + helpers), P4."""

    expired_counter = "not_found_after_retention"

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, protocol=LEGACY, **kwargs)
        self.protocol = PROTOCOL
        self._methods = {
            "initialize": self._initialize,
            "tools/list": self._tools_list,
            "tools/call": self._call_tool,
        }
        self._held: dict[int, tuple[HttpRequest, Task]] = {}
        """The run a held start created, by the held request (answered at release). The
        entry keeps the request itself: an ``id()`` is unique only among live objects,
        and a held start whose flight ended (its worker killed, its reply lost) leaves
        its entry behind; once the request was freed, a new request could reuse its
        ``id()`` and be answered with another start's run."""

    # --- truth as the mapping accepts it ------------------------------------------------

    def terminal_status(self, outcome: str) -> str:
        return COMPLETED if outcome == VALUE else FAILED

    def _payload(self, task: Task) -> bytes:
        """``{run, items, usage}``, what the mapping accepts for a finished run (X6)."""
        if task.status == CANCELLED:
            return canonical_json(stable(run_view(task)))
        return canonical_json(
            {"run": stable(run_view(task)), "items": run_items(task), "usage": USAGE}
        )

    def retry_after_s(self) -> float | None:
        return self.rng.choice((None, 5.0))

    # --- negotiation --------------------------------------------------------------------

    def _initialize(self, call: Call) -> Served:
        capabilities: dict[str, Any] = {"tools": {}}
        if self.lookup_offered:
            capabilities["experimental"] = {SUBMISSION_KEY_META_KEY: {}}
        return self._initialized(call, capabilities)

    def _tools_list(self, call: Call) -> Served:
        schema = {"type": "object"}
        tools = [
            {
                "name": TOOL,
                "inputSchema": schema,
                "annotations": {"idempotentHint": self.idempotent},
            },
            *({"name": helper, "inputSchema": schema} for helper in HELPERS),
        ]
        return self._answer(call.rid, {"tools": tools}, what="session")

    # --- the tools ------------------------------------------------------------------------

    def _call_tool(self, call: Call) -> Served | Hold:
        name = call.params.get("name")
        arguments = call.params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        if name == TOOL:
            return self._start(call, arguments)
        if name == "get-actor-run":
            return self._get_run(call, arguments)
        if name == "get-dataset-items":
            return self._page(call, arguments)
        if name == "abort-actor-run":
            return self._abort(call, arguments)
        return self._error(call.rid, -32602, f"Unknown tool: {name}", what="session")

    def _run_result(self, call: Call, task: Task, *, what: str, **notes: Any) -> Served:
        run = run_view(task)
        result = {
            "content": [{"type": "text", "text": json.dumps(run)}],
            "structuredContent": run,
            "_meta": {RUN_META_KEY: dict(USAGE)},
        }
        return self._answer(call.rid, result, what=what, task_id=task.task_id, **notes)

    def _tool_error(self, call: Call, text: str, *, what: str) -> Served:
        result = {"content": [{"type": "text", "text": text}], "isError": True}
        return self._answer(call.rid, result, what=what)

    def _release(self, task: Task, now: float, wait_s: float) -> float:
        """When a long poll of ``wait_s`` answers: the run's next change, or the end."""
        if task.status in TERMINAL:
            return now
        return min(now + wait_s, task.next_change(now), max(task.expires_at, now))

    def _start(self, call: Call, arguments: dict[str, Any]) -> Served | Hold:
        """The Actor tool: starts the run (or finds it), answers when it changes or
        ``waitSecs`` ends: the early return."""
        entry = self._held.pop(id(call.request), None) if call.held_since is not None else None
        held = entry[1] if entry is not None and entry[0] is call.request else None
        if held is not None:
            held.advance(call.now)
            return self._run_result(call, held, what="create", handed=held.task_id)
        wait = arguments.get("waitSecs") or 0
        business = digest_json({k: v for k, v in arguments.items() if k != "waitSecs"})
        if business not in self.plans:
            text = "Invalid input: unknown arguments"
            content = [{"type": "text", "text": text}]
            self.rejected[business] = digest_json({"isError": True, "content": content})
            return self._tool_error(call, text, what="create")
        meta = call.params.get("_meta")
        key = meta.get(SUBMISSION_KEY_META_KEY) if isinstance(meta, Mapping) else None
        key = key if isinstance(key, str) and key and self.lookup_offered else None
        task = self.existing(key, business)
        if task is None:
            self.creates += 1
            task = self.new_task(
                key or "", business, call.now, task_id=f"{self.name}-run{self.creates}", reuse=False
            )
            task.items = self.rng.randint(1, 250)
            if task.outcome == VALUE and self.rng.random() < self.faults.zero_items:
                self._count("apify_zero_items")
                task.items = 0
        task.advance(call.now)
        release = self._release(task, call.now, float(wait))
        if release > call.now:
            self._held[id(call.request)] = (call.request, task)
            return Hold(release)
        return self._run_result(call, task, what="create", handed=task.task_id)

    def _get_run(self, call: Call, arguments: dict[str, Any]) -> Served | Hold:
        """``get-actor-run``: a long poll of ``waitSecs`` (faults drawn on arrival)."""
        run_id = str(arguments.get("runId"))
        fetching = call.hop is not None and call.hop.action == "FetchResult"
        what = "result" if fetching else "status"
        if call.held_since is not None:
            task = self.live(run_id, call.now)
            if task is None:
                return self._tool_error(call, f"Run {run_id} not found", what=what)
            return self._run_result(call, task, what=what)
        if call.hop is not None:
            throttled = self._throttle(what)
            if throttled is not None:
                return throttled
        task = self.observe(run_id, call.now, call.hop)
        if task is None:
            return self._tool_error(call, f"Run {run_id} not found", what=what)
        if call.hop is not None and self.rng.random() < self.faults.crossed_reply:
            other = self._other_task(task, call.now, terminal=False)
            if other is not None:
                self._count("reply_crossed")
                return self._run_result(call, other, what=what)
        release = self._release(task, call.now, float(arguments.get("waitSecs") or 0))
        if release > call.now:
            return Hold(release)
        return self._run_result(call, task, what=what)

    def _page(self, call: Call, arguments: dict[str, Any]) -> Served:
        """``get-dataset-items``: one page of the run's default dataset (X6)."""
        dataset = str(arguments.get("datasetId"))
        task = self.live(dataset.removeprefix(DATASET_PREFIX), call.now)
        if task is None:
            return self._tool_error(call, f"Dataset {dataset} not found", what="result")
        offset = int(arguments.get("offset") or 0)
        limit = int(arguments.get("limit") or PAGE_LIMIT_DEFAULT)
        chunk = run_items(task, slice(offset, offset + limit))
        page = {
            "items": chunk,
            "offset": offset,
            "itemCount": len(chunk),
            "totalItemCount": item_count(task),
        }
        digest = None
        if self.rng.random() < self.faults.page_loss:
            # The page's response is lost on the wire (P4): the client times out.
            self._count("apify_page_lost")
            served = self._answer(call.rid, {"structuredContent": page}, what="page")
            served.dropped = True
            return served
        if self.rng.random() < self.faults.page_contradict:
            self._count("apify_page_contradicts")
            page["itemCount"] = len(chunk) + 1
        elif task.status in (COMPLETED, FAILED):
            digest = self.truth_digest(task)
        content = [{"type": "text", "text": f"{len(chunk)} items"}]
        result = {"content": content, "structuredContent": page}
        return self._answer(call.rid, result, what="result", result_digest=digest)

    def _abort(self, call: Call, arguments: dict[str, Any]) -> Served:
        """``abort-actor-run``: at once (ABORTED) or gracefully (ABORTING), X5."""
        run_id = str(arguments.get("runId"))
        task = self.live(run_id, call.now)
        if task is None:
            return self._tool_error(call, f"Run {run_id} not found", what="cancel")
        self.note_cancel(call.hop)
        graceful = arguments.get("gracefully") is True
        if task.status not in TERMINAL:
            later = call.now + self.rng.uniform(0.0, 10.0) if graceful else call.now
            task.cancel_graceful = graceful
            # The run ends exactly when the abort lands: the truth's coin decides.
            self.cancel_task(task, call.now, effective=later, tie="apify_abort_races_completion")
        if task.status in (COMPLETED, FAILED):
            # The abort came after the run ended: the run keeps its terminal (X5).
            self._count("apify_abort_races_completion")
        return self._run_result(call, task, what="cancel")


__all__ = ["ApifyServer", "run_items", "run_view"]
