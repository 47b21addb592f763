"""barnraise on the network: A2A 1.0, a WebSocket ``/a2a`` endpoint and MCP, on one tool table.

The server side (:mod:`barnraise.gateway.server`, run by ``barnraise serve`` and
``barnraise mcp``) needs the ``gateway`` extra: ``pip install 'barnraise[gateway]'``.
This package's own names are the client side, importable without it:
:func:`connect` needs only ``websockets``, and only when it connects.

Modules: ``card`` (the agent card from the tool table), ``hub`` (remote agents as
Clients: identity, numbered mail, retried calls, signed messages, counters),
``jsonrpc`` (framing), ``ws`` (WebSocket ``/a2a``), ``a2a_binding`` (A2A
JSON-RPC over HTTP and SSE), ``mcp_surface`` (MCP), ``hosting`` (the world a
server hosts), ``server`` (the app and uvicorn), ``metrics`` (``GET /metrics``),
``remote`` (the client).
"""

from barnraise.gateway.remote import Backoff, RemoteClient, RemoteError, connect

__all__ = ["Backoff", "RemoteClient", "RemoteError", "connect"]
