"""longcall's durable tasks for FastMCP 4.x servers: ``LongcallTasks`` (``pip install
'longcall[fastmcp]'``).

Owns: the public name an application imports. Must not: import anything FastMCP does not
ship in ``fastmcp-slim[server]`` (no fastmcp-tasks, docket or Redis)::

    from longcall.integrations.fastmcp import LongcallTasks

    mcp.add_extension(LongcallTasks(store="sqlite:///tasks.db"))
"""

from longcall.integrations.fastmcp.extension import LongcallTasks

__all__ = ["LongcallTasks"]
