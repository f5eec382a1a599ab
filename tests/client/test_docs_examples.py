"""The Python examples of the README's tour and of docs/guide.md run as written, against
the reference server on 127.0.0.1 (their URL swapped for the test server's)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest
from tests.bounds import LOADED_MACHINE_S
from tests.client.conftest import Peer

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DOC_URL = "http://127.0.0.1:8765/mcp"
EXAMPLE_TIMEOUT_S = LOADED_MACHINE_S


def python_blocks(path: Path) -> list[str]:
    """Every ```python block of a Markdown file."""
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


GUIDE = python_blocks(ROOT / "docs" / "guide.md")
README = python_blocks(ROOT / "README.md")
CALLER_EXAMPLES = [block for block in README if "from longcall import" in block]


async def run_example(code: str, peer: Peer, tmp_path: Path) -> str:
    assert DOC_URL in code, "an example calls the reference server at its documented URL"
    env = {**os.environ, "LONGCALL_LEDGER": f"sqlite:///{tmp_path / 'example.db'}"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code.replace(DOC_URL, peer.url),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    async with asyncio.timeout(EXAMPLE_TIMEOUT_S):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()[-3000:]
    return out.decode()


def test_the_docs_have_examples() -> None:
    """The guide has its examples and the README its Python caller example."""
    assert len(GUIDE) >= 8
    assert len(CALLER_EXAMPLES) == 1


@pytest.mark.parametrize("index", range(len(GUIDE)))
async def test_guide_example_runs(peer: Peer, tmp_path: Path, index: int) -> None:
    """Each Python example of docs/guide.md exits 0."""
    await run_example(GUIDE[index], peer, tmp_path)


async def test_readme_python_example_runs(peer: Peer, tmp_path: Path) -> None:
    """The README tour's Python example exits 0 and prints an ok outcome."""
    out = await run_example(CALLER_EXAMPLES[0], peer, tmp_path)
    assert "ok" in out
