"""Which upstream tool each gateway tool is, and under which name it is served (G1).

Owns: :class:`UpstreamTool` and the naming rule: a tool keeps its upstream name when
exactly one upstream lists it and it does not clash with a gateway tool; otherwise it is
served as ``<server>__<tool>`` (the server's name from the servers file, with anything
but letters, digits, ``_`` and ``-`` replaced by ``_``), so pointing a host at the
gateway changes nothing the model already knows. Also what of an upstream's descriptor
is served again. Must not: perform I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

PREFIX_SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
SERVED_KEYS = ("title", "description", "inputSchema", "annotations", "icons")
"""What of an upstream descriptor the gateway serves again. Not ``outputSchema``: a
host SDK checks structured content against it, and an early return's structured content
is the handle, not the tool's output. Not ``execution``: the gateway's own task support
is what a host meets."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamTool:
    """One upstream tool as the gateway serves it."""

    server: str
    """The upstream's name in the servers file."""
    url: str
    protocol: str | None
    name: str
    """The tool's name at the upstream."""
    exposed: str
    """The name hosts call it by."""
    descriptor: Mapping[str, Any]

    def definition(self) -> dict[str, Any]:
        """The ``Tool`` object the gateway lists for it (without ``execution``)."""
        served: dict[str, Any] = {"name": self.exposed}
        for key in SERVED_KEYS:
            if key in self.descriptor:
                served[key] = self.descriptor[key]
        served.setdefault("description", "")
        schema = served.get("inputSchema")
        if not isinstance(schema, Mapping):
            served["inputSchema"] = {"type": "object", "properties": {}}
        return served


def prefixed(server: str, tool: str) -> str:
    """The name of ``tool`` of ``server`` when its own name is taken."""
    return f"{_UNSAFE.sub('_', server)}{PREFIX_SEPARATOR}{tool}"


def name_tools(
    listed: Mapping[str, tuple[str, str | None, Sequence[Mapping[str, Any]]]],
    reserved: Collection[str],
) -> list[UpstreamTool]:
    """Every listed tool with the name hosts see: ``listed`` maps a server's name to
    (URL, protocol, its tools as listed); ``reserved`` are the gateway's own tools."""
    owners: dict[str, int] = {}
    for _url, _protocol, tools in listed.values():
        for name in {str(t.get("name")) for t in tools if isinstance(t.get("name"), str)}:
            owners[name] = owners.get(name, 0) + 1
    named: list[UpstreamTool] = []
    for server, (url, protocol, tools) in sorted(listed.items()):
        for tool in tools:
            listed_name = tool.get("name")
            if not isinstance(listed_name, str) or not listed_name:
                continue
            name = listed_name
            alone = owners.get(name) == 1 and name not in reserved
            named.append(
                UpstreamTool(
                    server=server,
                    url=url,
                    protocol=protocol,
                    name=name,
                    exposed=name if alone else prefixed(server, name),
                    descriptor=tool,
                )
            )
    return named
