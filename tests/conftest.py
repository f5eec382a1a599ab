"""Shared pytest configuration: the anyio backend for async tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (the runtime's loop)."""
    return "asyncio"
