"""JSON-RPC 2.0 framing shared by the WebSocket endpoint and the A2A binding.

One parser for requests (:func:`parse`), one encoder for answers. Faults use
the JSON-RPC codes; the codes from -32001 to -32009 are A2A's own, and
barnraise's gateway adds two in the server range:

====== ============================================================
-32700 parse error: the frame is not JSON, or not UTF-8
-32600 invalid request: not a JSON-RPC 2.0 request object (or too large, or
       nested deeper than :data:`MAX_DEPTH`)
-32601 method not found: no such tool or gateway method
-32602 invalid params: params not an object, or not what the tool's schema asks
-32603 internal error: a bug on the server, counted; the server goes on
-32040 unauthenticated: no agent yet (join, or present a token)
-32041 refused: a signed message or an act as another agent, with its reason
====== ============================================================

Limits before parsing: every surface refuses a frame over its size limit
before reading it whole, and :func:`check_depth` refuses one nested deeper
than :data:`MAX_DEPTH` before the parser runs (msgspec would recurse about a
thousand levels, then raise ``RecursionError``). The depth is counted only in
a frame with more than ``MAX_DEPTH`` opening brackets (a count at C speed);
then one vectorised pass over its brackets and quotes finds it (less than half
of msgspec's own time to decode that frame; figures in docs/gateway.md).
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec
import numpy as np

__all__ = [
    "COUNTER",
    "FORBIDDEN",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_DEPTH",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "UNAUTHENTICATED",
    "Request",
    "RpcError",
    "check_depth",
    "dumps",
    "error",
    "loads",
    "parse",
    "parse_batch",
    "success",
    "too_large",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
UNAUTHENTICATED: Final = -32040
FORBIDDEN: Final = -32041

#: The counter each fault is counted under.
COUNTER: Final = {
    PARSE_ERROR: "parse_error", INVALID_REQUEST: "invalid_request",
    METHOD_NOT_FOUND: "unknown_method", INVALID_PARAMS: "invalid_params",
    INTERNAL_ERROR: "internal_error", UNAUTHENTICATED: "unauthenticated",
    FORBIDDEN: "refused",
}

#: The deepest nesting of arrays and objects a frame may have (a tool's arguments
#: nest a few levels; A2A's envelope adds about five).
MAX_DEPTH: Final = 64

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder()
dumps: Final = _encoder.encode

Id = str | int | None


class RpcError(Exception):
    """A fault to answer with: ``code``, ``message`` and optional ``data``."""

    def __init__(self, code: int, message: str, data: Any = None, *, id: Id = None,
                 counted: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.id = id
        #: True when the refusal was already counted under a more precise reason.
        self.counted = counted


class Request(msgspec.Struct, frozen=True):
    """A parsed request: ``notification`` when it has no id (and so gets no answer)."""

    method: str
    params: dict[str, Any]
    id: Id
    notification: bool


def parse(frame: bytes | str) -> Request:
    """Parse one frame; :class:`RpcError` (-32700, -32600, -32602) if it is not a request."""
    body = loads(frame)
    if isinstance(body, list):
        raise RpcError(INVALID_REQUEST, "batch requests are not supported here: send one "
                       "request per message")
    return _request(body)


def parse_batch(frame: bytes | str, limit: int) -> Request | list[Request | RpcError]:
    """Parse a frame that may be a batch (a JSON array of requests, JSON-RPC 2.0 section 6).

    A single request comes back as :func:`parse` gives it; a batch as a list
    with, for each element, its request or the fault it is (each answered in
    its place). :class:`RpcError` -32700 if the frame is not JSON, -32600 for
    an empty batch or one of more than ``limit`` requests.
    """
    body = loads(frame)
    if not isinstance(body, list):
        return _request(body)
    if not body:
        raise RpcError(INVALID_REQUEST, "an empty batch")
    if len(body) > limit:
        raise RpcError(INVALID_REQUEST, f"a batch of {len(body)} requests; at most {limit}")
    items: list[Request | RpcError] = []
    for element in body:
        try:
            items.append(_request(element))
        except RpcError as exc:
            items.append(exc)
    return items


def loads(frame: bytes | str) -> Any:
    """Decode one JSON frame under the limits: :class:`RpcError` -32600 if it nests
    deeper than :data:`MAX_DEPTH`, -32700 if it is not JSON or not UTF-8."""
    # check_depth's cheap bound, inline (on every frame): a count costs about 2,000
    # instructions at a tool call's 150 bytes, a call of check_depth 1,200 more, an
    # `in` 350 (cachegrind); a tool call's frame is an object, often without an array.
    if isinstance(frame, str):
        deep = frame.count("{") + (frame.count("[") if "[" in frame else 0) > MAX_DEPTH
    else:
        deep = frame.count(b"{") + (frame.count(b"[") if b"[" in frame else 0) > MAX_DEPTH
    if deep:
        check_depth(frame)
    try:
        return _decoder.decode(frame)
    except msgspec.DecodeError as exc:
        raise RpcError(PARSE_ERROR, f"parse error: {_why(frame, exc)}") from None
    except (UnicodeDecodeError, UnicodeEncodeError) as exc:  # a string that is not UTF-8
        raise RpcError(PARSE_ERROR, f"parse error: a string is not UTF-8 "
                       f"({exc.reason})") from None
    except RecursionError:  # only if check_depth let it through: never, but bounded
        raise RpcError(INVALID_REQUEST, f"nested too deep: at most {MAX_DEPTH} levels of "
                       "arrays and objects") from None

#: A \\u escape of a UTF-16 surrogate that is not half of a pair: a high one not
#: followed by a low one, or a low one not preceded by a high one.
_LONE_SURROGATE: Final = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def _why(frame: bytes | str, exc: msgspec.DecodeError) -> str:
    """What is wrong with a frame msgspec refused. msgspec says "Input data was
    truncated" of a lone surrogate escape (``"\\ud800"``), which misleads: name it."""
    message = str(exc)
    if message.startswith("Input data was truncated"):
        data = frame.encode("utf-8", "surrogatepass") if isinstance(frame, str) else frame
        found = _LONE_SURROGATE.search(data)
        if found is not None:
            return (f"a lone surrogate escape ({found.group().decode()}) is not a "
                    "character; JSON text must be Unicode")
    return message


# The bytes that are not a quote or a bracket (deleted before counting depth).
_NOT_STRUCTURE: Final = bytes(b for b in range(256) if b not in b'"[]{}')
_QUOTE, _OPENERS, _CLOSERS = ord('"'), (ord("["), ord("{")), (ord("]"), ord("}"))


def check_depth(frame: bytes | str) -> None:
    """:class:`RpcError` -32600 if ``frame`` nests arrays and objects deeper than
    :data:`MAX_DEPTH` (brackets inside strings do not count); -32700 for a text
    frame that cannot be UTF-8. Cheap unless the frame has many opening brackets."""
    if isinstance(frame, str):
        if frame.count("[") + frame.count("{") <= MAX_DEPTH:
            return
        try:
            frame = frame.encode()
        except UnicodeEncodeError as exc:
            raise RpcError(PARSE_ERROR, f"parse error: a string is not UTF-8 "
                           f"({exc.reason})") from None
    elif frame.count(b"[") + frame.count(b"{") <= MAX_DEPTH:
        return
    if b"\\" in frame:  # an escaped quote is no string's end; \\\\ escapes itself first
        frame = frame.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = np.frombuffer(frame.translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    outside = (np.cumsum(marks == _QUOTE, dtype=np.int64) & 1) == 0
    step = ((marks == _OPENERS[0]) | (marks == _OPENERS[1])).astype(np.int64) \
        - ((marks == _CLOSERS[0]) | (marks == _CLOSERS[1]))
    depth = int(np.cumsum(step * outside).max(initial=0))
    if depth > MAX_DEPTH:
        raise RpcError(INVALID_REQUEST, f"nested {depth} deep; the limit "
                       f"is {MAX_DEPTH} levels of arrays and objects (MAX_DEPTH)")


def _request(body: Any) -> Request:
    if not isinstance(body, dict):
        raise RpcError(INVALID_REQUEST, "a request is a JSON object, got "
                       f"{type(body).__name__}")
    raw_id = body.get("id")
    request_id: Id = raw_id if type(raw_id) in (str, int) else None
    if "id" in body and raw_id is not None and type(raw_id) not in (str, int):
        raise RpcError(INVALID_REQUEST, "id must be a string, an integer or null")
    if body.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, "jsonrpc must be exactly \"2.0\"", id=request_id)
    method = body.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, "method must be a non-empty string", id=request_id)
    params = body.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object of named arguments, got "
                       f"{type(params).__name__}", id=request_id)
    return Request(method, params, request_id, "id" not in body)


def success(request_id: Id, result: Any) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def error(request_id: Id, code: int, message: str, data: Any = None) -> bytes:
    fault: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        fault["data"] = data
    return dumps({"jsonrpc": "2.0", "id": request_id, "error": fault})


def too_large(limit: int) -> bytes:
    """The body of every HTTP ``413`` a POST route answers for a body over ``limit`` bytes:
    a JSON-RPC error (-32600, no id: the request was not read)."""
    return error(None, INVALID_REQUEST, f"payload too large: over {limit} bytes")
