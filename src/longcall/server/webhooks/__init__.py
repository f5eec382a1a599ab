"""Signed webhooks from the tool side (SPEC S7; docs/design/webhooks.md): a principal
registers endpoints, every status change of its tasks is enqueued in the task store's
durable outbox with the change itself, and a sender delivers each one, signed
(Standard Webhooks ``v1``/``v1a``), retried with backoff, only to addresses the operator
allows. A delivery tells a caller *when* to poll, never what happened.

Must not: be imported by the store for more than its value types (``model``).
"""

from longcall.server.webhooks.model import (
    AddressPolicy,
    Delivery,
    DeliveryState,
    Endpoint,
    Outcome,
    RetryPolicy,
    WebhookOptions,
)

__all__ = [
    "AddressPolicy",
    "Delivery",
    "DeliveryState",
    "Endpoint",
    "Outcome",
    "RetryPolicy",
    "WebhookOptions",
]
