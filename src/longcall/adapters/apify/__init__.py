"""P4: Apify-style "early return + poll" tools over MCP, client side: the pure mapping
(:mod:`~longcall.adapters.apify.mapping`) and the thin I/O shell that runs it over HTTP
(:mod:`~longcall.adapters.apify.client`). The names other modules use are re-exported
here."""

from longcall.adapters.apify.client import ApifyAdapter, connect
from longcall.adapters.apify.mapping import (
    ADAPTER_VERSION,
    FAILED_STATUSES,
    HELPERS,
    JSONRPC_FAILURES,
    PAGE_LIMIT_DEFAULT,
    PAGES_MAX,
    POLL_INTERVAL_S,
    PROTOCOL,
    RUN_META_KEY,
    SUBMISSION_KEY_META_KEY,
    TERMINAL_STATUSES,
    WAIT_SECS_DEFAULT,
    WAIT_SECS_MAX,
    WORKING_STATUSES,
    ApifyMapping,
    Clock,
    model_text,
    page_problem,
    run_item_count,
    run_of,
    stable_run,
    usage_of,
)

__all__ = [
    "ADAPTER_VERSION",
    "FAILED_STATUSES",
    "HELPERS",
    "JSONRPC_FAILURES",
    "PAGES_MAX",
    "PAGE_LIMIT_DEFAULT",
    "POLL_INTERVAL_S",
    "PROTOCOL",
    "RUN_META_KEY",
    "SUBMISSION_KEY_META_KEY",
    "TERMINAL_STATUSES",
    "WAIT_SECS_DEFAULT",
    "WAIT_SECS_MAX",
    "WORKING_STATUSES",
    "ApifyAdapter",
    "ApifyMapping",
    "Clock",
    "connect",
    "model_text",
    "page_problem",
    "run_item_count",
    "run_of",
    "stable_run",
    "usage_of",
]
