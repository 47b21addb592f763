"""The A2A 1.0 JSON-RPC binding: tool calls as A2A messages, conversations and
delegations as A2A tasks.

``POST /a2a/jsonrpc`` (the URL on the agent card) and ``POST /`` (the base URL, where
generic clients post) serve, the same:

``SendMessage``           the message's call is made as the caller: a data part
                          ``{"tool": NAME, "arguments": {...}}``, or else its text
                          (:mod:`barnraise.gateway.text_calls`: ``TOOL key=value ...``,
                          the same JSON as text, or ``help``). Every answer is an agent
                          message with the tool's result dict as a data part and a
                          short text rendering of it beside.
``SendStreamingMessage``  the same over SSE.
``GetTask``, ``ListTasks``, ``CancelTask``   the caller's conversations and its
                          session's tasks.
``SubscribeToTask``       the Task, then its status updates over SSE until terminal.

Which answers are Tasks, decided once: **a text message is a conversation**, so its
answer is a Task (a :class:`Chat`): a message without ``taskId`` opens one, in state
``TASK_STATE_WORKING`` until the caller cancels it, with the message's
``contextId`` (the session's id if it gave none); one with a conversation's
``taskId`` goes on in it. The answer is the Task's status message; each message and
answer joins its history, each result its artifacts. **A data part is a call**, so
its answer is the Message itself, except a successful ``task_delegate``, whose
answer is the world's **Task** (its id the barnraise task id, its ``contextId`` the
session, its state following the task: pending or blocked -> ``SUBMITTED``;
in_progress -> ``WORKING``; awaiting_approval -> ``INPUT_REQUIRED``; completed ->
``COMPLETED``; failed -> ``FAILED``; cancelled -> ``CANCELED``; the record in its
metadata, a result as an artifact). A data part sent with a conversation's
``taskId`` goes on in the conversation.

Identity: ``session_join`` or ``session_create`` need no token, and their
result carries one; every other call, ``help`` included, needs
``Authorization: Bearer TOKEN`` (401 otherwise, counted; the refusal says how to join).
A message with neither a text nor a data part gets ``ContentTypeNotSupported``
(-32005); data parts none of which is a tool call, ``InvalidParams`` (-32602). A
missing task is -32001, a task that cannot be cancelled -32002, a bad ListTasks or
GetTask parameter -32602; a streaming method's refusal is one SSE ``error`` event
when the client asked for a stream (``Accept: text/event-stream``).
A request reaches this binding only past the gateway's one edge rule
(:class:`~barnraise.gateway.server.EdgeMiddleware`: this server's ``Host``, no
foreign ``Origin``, ``Content-Type: application/json``); its body is bounded in
size and depth before it is parsed (-32600), and bytes that are not UTF-8 are a
parse error (-32700), never an internal one.
Shapes are the JSON form of ``a2a.types`` (camelCase, enum names), produced
here directly; the tests read them back with the official a2a-sdk client.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse

from barnraise.gateway import jsonrpc, text_calls
from barnraise.gateway.card import served_tools
from barnraise.gateway.hub import AgentSlot, Hub, Refused
from barnraise.gateway.jsonrpc import RpcError
from barnraise.gateway.ws import bearer_token
from barnraise.sim.events import TASK_EVENTS, status_after
from barnraise.sim.messages import Message
from barnraise.sim.tokens import random_id
from barnraise.sim.tools import TOOLS

__all__ = ["MAX_CHATS", "STATE_OF", "A2ABinding", "Chat", "TaskWatch"]

# A2A's own error codes (a2a.utils.errors.JSON_RPC_ERROR_CODE_MAP).
TASK_NOT_FOUND: Final = -32001
TASK_NOT_CANCELABLE: Final = -32002
PUSH_NOT_SUPPORTED: Final = -32003
UNSUPPORTED_OPERATION: Final = -32004
CONTENT_TYPE_NOT_SUPPORTED: Final = -32005
VERSION_NOT_SUPPORTED: Final = -32009

#: barnraise task status -> A2A TaskState.
STATE_OF: Final = {
    "pending": "TASK_STATE_SUBMITTED", "blocked": "TASK_STATE_SUBMITTED",
    "in_progress": "TASK_STATE_WORKING", "awaiting_approval": "TASK_STATE_INPUT_REQUIRED",
    "completed": "TASK_STATE_COMPLETED", "failed": "TASK_STATE_FAILED",
    "cancelled": "TASK_STATE_CANCELED",
}
TERMINAL: Final = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED",
                             "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"})
#: A2A 1.0's TaskState names (but UNSPECIFIED, which filters nothing).
TASK_STATES: Final = frozenset({*STATE_OF.values(), "TASK_STATE_REJECTED",
                                "TASK_STATE_AUTH_REQUIRED"})
PAGE_SIZE: Final = 50  # ListTasks' page when pageSize is not given
MAX_PAGE_SIZE: Final = 100
MAX_CHATS: Final = 200  # conversations kept per agent, the oldest dropped past it
MAX_HISTORY: Final = 50  # messages (and artifacts) kept per conversation
MAX_KEPT: Final = 4096  # bytes of JSON a kept message may take
MAX_ID: Final = 256  # characters in a message's messageId or contextId
_MESSAGE_KEPT: Final = ("messageId", "role", "parts", "taskId", "contextId")
_ARTIFACT_KEPT: Final = ("artifactId", "name", "parts")
_JOINING: Final = frozenset({"session_create", "session_join"})
_STREAMING: Final = frozenset({"SendStreamingMessage", "SubscribeToTask"})
_ROLES: Final = ("ROLE_USER", "ROLE_AGENT")  # A2A 1.0's Role, but UNSPECIFIED
_KEEPALIVE: Final = 15.0  # wall seconds between SSE comments on a quiet stream


class TaskWatch:
    """Follows task events of the sessions someone streams, for every open stream.

    One hub-internal agent (not a session member) is subscribed to each such
    session's event topic; each event moves the queues of the streams on its task.
    """

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self._slot: AgentSlot | None = None
        self._sessions: set[str] = set()
        self._listeners: dict[str, set[asyncio.Queue[str]]] = {}

    def follow(self, session_id: str) -> None:
        """Make sure the events of ``session_id`` reach the watch (idempotent)."""
        if session_id in self._sessions:
            return
        if self._slot is None:
            self._slot = self.hub.new_slot("gateway-task-watch")
            self._slot.observer = self._heard
        dispatcher = self.hub.simulation.dispatcher
        dispatcher.subscribe(dispatcher.actor(self._slot.agent_id),
                             f"session:{session_id}:events")
        self._sessions.add(session_id)

    def listen(self, task_id: str) -> asyncio.Queue[str]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._listeners.setdefault(task_id, set()).add(queue)
        return queue

    def stop(self, task_id: str, queue: asyncio.Queue[str]) -> None:
        listeners = self._listeners.get(task_id)
        if listeners is not None:
            listeners.discard(queue)
            if not listeners:
                del self._listeners[task_id]

    def _heard(self, message: Message) -> None:
        content = message.content
        task_id = content.get("task_id")
        if content.get("event") not in TASK_EVENTS or not isinstance(task_id, str):
            return
        # the status the event leaves its task in (the watch keeps none), as an A2A state
        state = STATE_OF.get(status_after(content) or "", "TASK_STATE_UNSPECIFIED")
        for queue in self._listeners.get(task_id, ()):
            queue.put_nowait(state)


def _data_message(data: Any, context_id: str | None, message_id: str,
                  task_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": message_id, "role": "ROLE_AGENT",
                               "parts": [{"data": data, "mediaType": "application/json"}]}
    if context_id:
        message["contextId"] = context_id
    if task_id:
        message["taskId"] = task_id
    return message


def task_of(record: dict[str, Any], session_id: str | None,
            status_message: dict[str, Any] | None = None) -> dict[str, Any]:
    """An A2A Task (JSON) for a barnraise task record (``task_get_queue``'s form)."""
    status: dict[str, Any] = {"state": STATE_OF.get(record.get("status", ""),
                                                    "TASK_STATE_UNSPECIFIED")}
    if status_message is not None:
        status["message"] = status_message
    task: dict[str, Any] = {"id": record["task_id"], "status": status,
                            "metadata": {"barnraise": record}}
    if session_id:
        task["contextId"] = session_id
    if record.get("result"):
        task["artifacts"] = [{"artifactId": f"{record['task_id']}-result", "name": "result",
                              "parts": [{"data": record["result"],
                                         "mediaType": "application/json"}]}]
    return task


class A2ABinding:
    """The Starlette endpoint of the A2A JSON-RPC binding (see the module doc)."""

    def __init__(self, hub: Hub, watch: TaskWatch, *,
                 offered: Callable[[], str | None] = lambda: None) -> None:
        """``offered``: the session an outsider is told to join (in ``help``)."""
        self.hub = hub
        self.watch = watch
        self._offered = offered
        self.counters = hub.counters
        #: The tools help lists: the table's, less those this server refuses.
        self.tools = served_tools(hub.disabled)
        self._ids = itertools.count(1)

    async def endpoint(self, request: Request) -> Response:
        try:
            return await self._handle(request)
        except ClientDisconnect:  # gone (or closed for a late body): nobody to answer
            return Response(status_code=400)
        except Exception as exc:  # nothing from the network may take the server down
            self.counters.add("internal_error")
            return _json(jsonrpc.error(None, jsonrpc.INTERNAL_ERROR, f"internal error: {exc!r}"))

    async def _handle(self, request: Request) -> Response:
        body = await self._body(request)
        if body is None:  # 413, as on /mcp: the body was not read
            return _json(jsonrpc.too_large(self.hub.limits.max_frame), 413)
        try:
            rpc = jsonrpc.parse(body)
        except RpcError as exc:
            self.counters.add(jsonrpc.COUNTER[exc.code])
            return _json(jsonrpc.error(exc.id, exc.code, exc.message))
        version = request.headers.get("a2a-version")
        if version and not (version == "1.0" or version.startswith("1.0.")):
            self.counters.add("unsupported_version")
            return _json(jsonrpc.error(rpc.id, VERSION_NOT_SUPPORTED,
                                       f"A2A version {version} is not supported; this server "
                                       "speaks 1.0"))
        token = bearer_token(request.headers.get("authorization"))
        slot: AgentSlot | None = None
        if token is not None:
            try:
                slot = self.hub.slot_for_token(token)
            except Refused as exc:
                self.counters.add(exc.reason)
                return _unauthorized(rpc.id, str(exc))
        try:
            if rpc.method in ("SendMessage", "SendStreamingMessage"):
                return await self._send_message(rpc, slot)
            if rpc.method in ("GetTask", "ListTasks", "CancelTask", "SubscribeToTask"):
                if slot is None:
                    self.counters.add("unauthenticated")
                    return _unauthorized(rpc.id, f"{rpc.method} needs the bearer token that "
                                         "session_join returned")
                if rpc.method == "GetTask":
                    return _json(jsonrpc.success(rpc.id, await self._get_task(slot, rpc.params)))
                if rpc.method == "ListTasks":
                    return _json(jsonrpc.success(rpc.id, await self._list_tasks(slot,
                                                                                rpc.params)))
                if rpc.method == "CancelTask":
                    return _json(jsonrpc.success(rpc.id, await self._cancel(slot, rpc.params)))
                return await self._subscribe(rpc, slot)
            if "PushNotification" in rpc.method:
                raise RpcError(PUSH_NOT_SUPPORTED, "push notifications are not supported")
            if rpc.method == "GetExtendedAgentCard":
                raise RpcError(UNSUPPORTED_OPERATION, "there is no extended agent card")
            raise RpcError(jsonrpc.METHOD_NOT_FOUND, f"no A2A method {rpc.method!r}")
        except RpcError as exc:
            if not exc.counted:
                self.counters.add(jsonrpc.COUNTER.get(exc.code, "refused"))
            refusal = jsonrpc.error(rpc.id, exc.code, exc.message, exc.data)
            if rpc.method in _STREAMING and "text/event-stream" in request.headers.get(
                    "accept", ""):
                # a client that asked for a stream reads the refusal as its one event
                return _sse(_refusal(refusal))
            return _json(refusal)

    async def _body(self, request: Request) -> bytes | None:
        limit = self.hub.limits.max_frame
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            self.counters.add("body_too_large")
            return None
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                self.counters.add("body_too_large")
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    # -- SendMessage ----------------------------------------------------------------------

    def _read(self, params: dict[str, Any]) -> tuple[dict[str, Any], str | None,
                                                     dict[str, Any], bool]:
        """The message, and the call it asks for: ``(message, tool, arguments, text)``,
        ``tool`` None for help; ``text`` when it was written as a text part."""
        message = params.get("message")
        if not isinstance(message, dict):
            raise RpcError(jsonrpc.INVALID_PARAMS, "params.message must be an A2A Message")
        message_id = message.get("messageId")
        if not isinstance(message_id, str) or not message_id:
            raise RpcError(jsonrpc.INVALID_PARAMS,
                           "params.message.messageId must be a non-empty string")
        for name in ("messageId", "contextId"):
            value = message.get(name)
            if isinstance(value, str) and len(value) > MAX_ID:
                raise RpcError(jsonrpc.INVALID_PARAMS, f"params.message.{name} is "
                               f"{len(value)} characters, over the {MAX_ID} allowed")
        if message.get("role") not in _ROLES:
            raise RpcError(jsonrpc.INVALID_PARAMS, "params.message.role must be one of "
                           f"{', '.join(_ROLES)}, not {message.get('role')!r}")
        parts = message.get("parts")
        if not isinstance(parts, list) or not parts:
            raise RpcError(jsonrpc.INVALID_PARAMS,
                           "params.message.parts must be a list of one part or more")
        data_parts = [p["data"] for p in parts if isinstance(p, dict) and "data" in p]
        for data in data_parts:
            if isinstance(data, dict) and isinstance(data.get("tool"), str):
                arguments = data.get("arguments", {})
                if arguments is None:
                    arguments = {}
                if not isinstance(arguments, dict):
                    raise RpcError(jsonrpc.INVALID_PARAMS,
                                   "the data part's arguments must be an object")
                return message, data["tool"], _integral(arguments), False
        texts = [p["text"] for p in parts if isinstance(p, dict)
                 and isinstance(p.get("text"), str)]
        if texts:
            # bounded as a data part is: by the body's bound, and in depth by loads
            call = text_calls.read_call("\n".join(texts), TOOLS)
            if call is None:
                return message, None, {}, True
            return message, call[0], _integral(call[1]), True
        if data_parts:
            raise RpcError(jsonrpc.INVALID_PARAMS, "the data part must be an object "
                           "{\"tool\": NAME, \"arguments\": {...}}")
        raise RpcError(CONTENT_TYPE_NOT_SUPPORTED,
                       "this agent reads a text part (a tool call as TOOL key=value ..., or "
                       "help) or a data part {\"tool\": NAME, \"arguments\": {...}}; the "
                       "message has neither")

    async def _send_message(self, rpc: jsonrpc.Request, slot: AgentSlot | None) -> Response:
        message, tool, arguments, text = self._read(rpc.params)
        configuration = rpc.params.get("configuration")
        configuration = {} if configuration is None else configuration
        if not isinstance(configuration, dict):
            raise RpcError(jsonrpc.INVALID_PARAMS, "params.configuration must be an object")
        _history_length(configuration)  # checked before anything is done
        chats: dict[str, Chat] = slot.chats if slot is not None else {}
        chat_id = message.get("taskId")
        chat: Chat | None = None
        # a message of a conversation under way: a text one with any taskId, a data
        # one with a conversation's (a data part's other taskIds are not read)
        if chat_id is not None and (text or (isinstance(chat_id, str) and chat_id in chats)):
            chat = chats.get(chat_id) if isinstance(chat_id, str) else None
            if chat is None:
                raise RpcError(TASK_NOT_FOUND, f"task {chat_id!r} not found among this "
                               "agent's")
            if chat.state in TERMINAL:
                raise RpcError(UNSUPPORTED_OPERATION, f"task {chat_id} is "
                               f"{chat.state}: start a new one (send without taskId)")
        if slot is None:
            if tool not in _JOINING:
                self.counters.add("unauthenticated")
                what = "help" if tool is None else tool
                return _unauthorized(rpc.id, f"{what} needs the bearer token that session_join "
                                     "returned; join first: "
                                     + text_calls.usage(self.tools, self._default_session()))
            try:
                slot = self.hub.new_slot()
            except Refused as exc:
                self.counters.add(exc.reason)
                raise RpcError(jsonrpc.INVALID_REQUEST, str(exc), counted=True) from None
        if tool is None:
            self.counters.add("a2a_help")
            result: dict[str, Any] = {
                "success": True, "tools": list(self.tools),
                "usage": text_calls.usage(self.tools,
                                          slot.session_id or self._default_session())}
        else:
            if tool == "task_delegate" and slot.session_id is not None:
                self.watch.follow(slot.session_id)
            message_id = message.get("messageId")
            call_id = f"a2a:{message_id}" if isinstance(message_id, str) and message_id else None
            try:
                result = await self.hub.call(slot, tool, arguments, call_id)
            finally:
                self.hub.forget(slot)  # a join that failed leaves no agent behind
        context_id = slot.session_id or message.get("contextId")
        reply = _answer(result, tool, context_id, f"reply-{next(self._ids)}")
        if text or chat is not None:
            return self._converse(rpc, slot, chat, message, (tool, result), reply,
                                  configuration)
        if tool != "task_delegate" or not result.get("success") or tool not in TOOLS:
            answer = {"message": reply}
            if rpc.method == "SendMessage":
                return _json(jsonrpc.success(rpc.id, answer))
            return _sse(_once(rpc.id, answer))
        task_id = str(result["task_id"])
        queue = self.watch.listen(task_id)
        try:
            record = await self._record(slot, task_id)
        except BaseException:
            self.watch.stop(task_id, queue)
            raise
        reply["taskId"] = task_id
        task = task_of(record, context_id, reply)
        task["history"] = [message]
        if rpc.method == "SendMessage":
            self.watch.stop(task_id, queue)
            return _json(jsonrpc.success(rpc.id, {"task": task}))
        return _sse(self._follow(rpc.id, task, queue, context_id, slot))

    def _converse(self, rpc: jsonrpc.Request, slot: AgentSlot, chat: Chat | None,
                  message: dict[str, Any], call: tuple[str | None, dict[str, Any]],
                  reply: dict[str, Any], configuration: dict[str, Any]) -> Response:
        """Answer a conversation's message with its Task (see the module doc), its
        history as long as ``configuration.historyLength`` asks (all kept if unsaid)."""
        tool, result = call
        conversations = self.hub.conversations
        held = self.hub.slots.get(slot.agent_id) is slot  # not a join that failed
        if chat is None:
            context = message.get("contextId")
            chat = Chat(random_id(), context if isinstance(context, str) and context
                        else slot.session_id or random_id())
            if held:
                conversations.open(slot, chat)
            else:
                slot.chats[chat.id] = chat
            while len(slot.chats) > MAX_CHATS:
                conversations.drop(slot, next(iter(slot.chats.values())))
        asked = {**message, "taskId": chat.id, "contextId": chat.context_id}
        reply["taskId"], reply["contextId"] = chat.id, chat.context_id
        grown = chat.add(asked, reply, tool, result)
        if held:
            conversations.grew(grown)
            # all agents' together, the oldest conversation of any dropped first (the
            # one just answered is kept: a conversation is bounded on its own)
            while conversations.kept > self.hub.limits.conversation_bytes \
                    and len(conversations) > 1:
                conversations.drop(*conversations.oldest(besides=chat))
        answer = {"task": chat.task(_history_length(configuration))}
        if rpc.method == "SendMessage":
            return _json(jsonrpc.success(rpc.id, answer))
        return _sse(_once(rpc.id, answer))

    def _default_session(self) -> str | None:
        return self._offered()

    async def _follow(self, request_id: jsonrpc.Id, task: dict[str, Any],
                      queue: asyncio.Queue[str], context_id: str | None,
                      slot: AgentSlot) -> AsyncIterator[bytes]:
        task_id = task["id"]
        self.hub.stream_opened(slot)  # an open stream keeps its agent alive (hub.py)
        try:
            yield _event(jsonrpc.success(request_id, {"task": task}))
            state = task["status"]["state"]
            while state not in TERMINAL:
                try:
                    new = await asyncio.wait_for(queue.get(), _KEEPALIVE)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if new == state:
                    continue
                state = new
                update: dict[str, Any] = {"taskId": task_id, "status": {"state": state}}
                if context_id:
                    update["contextId"] = context_id
                yield _event(jsonrpc.success(request_id, {"statusUpdate": update}))
        finally:
            self.hub.stream_closed(slot)
            self.watch.stop(task_id, queue)

    async def _follow_chat(self, request_id: jsonrpc.Id, chat: Chat,
                           queue: asyncio.Queue[dict[str, Any] | None],
                           slot: AgentSlot) -> AsyncIterator[bytes]:
        self.hub.stream_opened(slot)
        try:
            yield _event(jsonrpc.success(request_id, {"task": chat.task()}))
            state = chat.state
            while state not in TERMINAL:
                try:
                    update = await asyncio.wait_for(queue.get(), _KEEPALIVE)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if update is None:  # forgotten: nothing more will come
                    return
                state = update["status"]["state"]
                yield _event(jsonrpc.success(request_id, {"statusUpdate": update}))
        finally:
            self.hub.stream_closed(slot)
            chat.listeners.discard(queue)

    # -- tasks ----------------------------------------------------------------------------

    async def _records(self, slot: AgentSlot) -> list[dict[str, Any]]:
        """The task records of the caller's session (none outside one)."""
        if slot.session_id is None:
            return []
        found = await self.hub.call(slot, "task_get_queue", {"filter": {"status": "all"}})
        if not found.get("success"):
            raise RpcError(jsonrpc.INVALID_REQUEST, f"task_get_queue: {found.get('message')}",
                           found)
        return [dict(record) for record in found.get("tasks", ())]

    async def _record(self, slot: AgentSlot, task_id: str) -> dict[str, Any]:
        for record in await self._records(slot):
            if record.get("task_id") == task_id:
                return record
        raise RpcError(TASK_NOT_FOUND, f"task {task_id!r} not found among this agent's "
                       f"(session {slot.session_id})")

    def _task_id(self, params: dict[str, Any]) -> str:
        task_id = params.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise RpcError(jsonrpc.INVALID_PARAMS, "params.id must be a task id")
        return task_id

    async def _get_task(self, slot: AgentSlot, params: dict[str, Any]) -> dict[str, Any]:
        task_id = self._task_id(params)
        length = _history_length(params)
        chat: Chat | None = slot.chats.get(task_id)
        if chat is not None:
            return chat.task(length)
        return task_of(await self._record(slot, task_id), slot.session_id)

    async def _list_tasks(self, slot: AgentSlot, params: dict[str, Any]) -> dict[str, Any]:
        context = params.get("contextId")
        if context is not None and not isinstance(context, str):
            raise RpcError(jsonrpc.INVALID_PARAMS, "contextId must be a string")
        state = params.get("status")
        if state is None or state == "TASK_STATE_UNSPECIFIED":
            state = None
        elif state not in TASK_STATES:
            raise RpcError(jsonrpc.INVALID_PARAMS, f"status {state!r} is not a TaskState "
                           f"({', '.join(sorted(TASK_STATES))})")
        size = params.get("pageSize")
        size = PAGE_SIZE if size is None else size
        if type(size) is not int or not 1 <= size <= MAX_PAGE_SIZE:
            raise RpcError(jsonrpc.INVALID_PARAMS,
                           f"pageSize must be an integer 1..{MAX_PAGE_SIZE} (default "
                           f"{PAGE_SIZE}), not {size!r}")
        token = params.get("pageToken") or "0"
        if not isinstance(token, str) or not token.isdigit() or len(token) > 9:
            raise RpcError(jsonrpc.INVALID_PARAMS,
                           f"pageToken {token!r} is not one this server gave")
        length = _history_length(params)
        after = _after(params)
        artifacts = params.get("includeArtifacts", False)
        if not isinstance(artifacts, bool):
            raise RpcError(jsonrpc.INVALID_PARAMS, "includeArtifacts must be true or false")
        chats = sorted(slot.chats.values(), key=lambda c: (c.updated, c.order), reverse=True)
        tasks = [chat.task(length if length is not None else 0, artifacts)
                 for chat in chats
                 if (context is None or chat.context_id == context)
                 and (state is None or chat.state == state)
                 and (after is None or chat.updated > after)]
        if after is None and context in (None, slot.session_id):
            # the session's own tasks: they carry no timestamp, and come after
            for record in await self._records(slot):
                task = task_of(record, slot.session_id)
                if state is None or task["status"]["state"] == state:
                    if not artifacts:
                        task.pop("artifacts", None)
                    tasks.append(task)
        start = int(token)
        if start > len(tasks):
            raise RpcError(jsonrpc.INVALID_PARAMS,
                           f"pageToken {token!r} is past the last of {len(tasks)} tasks")
        page = tasks[start:start + size]
        following = start + size if start + size < len(tasks) else None
        return {"tasks": page,
                "nextPageToken": str(following) if following is not None else "",
                "pageSize": len(page), "totalSize": len(tasks)}

    async def _cancel(self, slot: AgentSlot, params: dict[str, Any]) -> dict[str, Any]:
        task_id = self._task_id(params)
        chat: Chat | None = slot.chats.get(task_id)
        if chat is not None:
            if chat.state in TERMINAL:
                raise RpcError(TASK_NOT_CANCELABLE, f"task {task_id} is already {chat.state}")
            chat.update("TASK_STATE_CANCELED")
            return chat.task()
        done = await self.hub.call(slot, "task_report", {
            "task_id": task_id, "status": "cancelled", "message": "cancelled over A2A"})
        if not done.get("success"):
            if done.get("error") in ("task_not_found", "not_a_member", "invalid_arguments"):
                raise RpcError(TASK_NOT_FOUND, f"task {task_id!r} not found among this "
                               f"agent's: {done.get('message')}", done)
            raise RpcError(TASK_NOT_CANCELABLE, f"{done.get('error')}: {done.get('message')}",
                           done)
        return task_of(await self._record(slot, task_id), slot.session_id)

    async def _subscribe(self, rpc: jsonrpc.Request, slot: AgentSlot) -> Response:
        task_id = self._task_id(rpc.params)
        chat: Chat | None = slot.chats.get(task_id)
        if chat is not None:
            if chat.state in TERMINAL:
                raise RpcError(UNSUPPORTED_OPERATION, f"task {task_id} is already "
                               f"{chat.state}: nothing more will happen")
            chat_queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
            chat.listeners.add(chat_queue)
            return _sse(self._follow_chat(rpc.id, chat, chat_queue, slot))
        if slot.session_id is not None:
            self.watch.follow(slot.session_id)
        queue = self.watch.listen(task_id)
        try:
            task = task_of(await self._record(slot, task_id), slot.session_id)
            if task["status"]["state"] in TERMINAL:
                raise RpcError(UNSUPPORTED_OPERATION, f"task {task_id} is already "
                               f"{task['status']['state']}: nothing more will happen")
        except BaseException:
            self.watch.stop(task_id, queue)
            raise
        return _sse(self._follow(rpc.id, task, queue, slot.session_id, slot))


class Chat:
    """One A2A conversation: the Task a text message opens (see the module doc).

    It is ``TASK_STATE_WORKING`` from its first message until it is cancelled; each
    message and answer joins its history, each answer's result its artifacts, both
    bounded (:data:`MAX_HISTORY`, the oldest dropped; of a message only its ids, role and
    parts are kept, the parts as a note of their size when its JSON is over
    :data:`MAX_KEPT` bytes); all agents' conversations together are bounded in bytes
    too (``Limits.conversation_bytes``, the oldest dropped).
    """

    __slots__ = ("answers", "artifacts", "context_id", "history", "id", "kept", "listeners",
                 "message", "order", "state", "updated")

    def __init__(self, task_id: str, context_id: str) -> None:
        self.id = task_id
        self.context_id = context_id
        self.state = "TASK_STATE_WORKING"
        self.message: dict[str, Any] | None = None
        self.answers = 0  # given so far (each artifact's number)
        #: Each kept message (artifact) with the bytes of its JSON; ``kept`` sums them.
        self.history: deque[tuple[dict[str, Any], int]] = deque(maxlen=MAX_HISTORY)
        self.artifacts: deque[tuple[dict[str, Any], int]] = deque(maxlen=MAX_HISTORY)
        self.kept = 0
        self.updated = _now_ms()
        self.order = next(_updates)  # which of two updates in one millisecond came last
        #: The queues of its subscribers' streams: each update, or None when it is
        #: forgotten (past :data:`MAX_CHATS`), which ends the stream.
        self.listeners: set[asyncio.Queue[dict[str, Any] | None]] = set()

    def add(self, asked: dict[str, Any], reply: dict[str, Any], tool: str | None,
            result: dict[str, Any]) -> int:
        """Keep a message and its answer; the bytes of JSON kept grew by (what is
        returned: less than nothing when as much as came in was dropped)."""
        before = self.kept
        self._keep(self.history, _kept(asked, _MESSAGE_KEPT))
        self._keep(self.history, _kept(reply, _MESSAGE_KEPT))
        self.answers += 1
        self._keep(self.artifacts, _kept({"artifactId": f"{self.id}-{self.answers}",
                                          "name": tool or "help", "parts": reply["parts"]},
                                         _ARTIFACT_KEPT))
        self.update(self.state, reply)
        return self.kept - before

    def _keep(self, into: deque[tuple[dict[str, Any], int]],
              entry: tuple[dict[str, Any], int]) -> None:
        if len(into) == into.maxlen:
            self.kept -= into[0][1]
        into.append(entry)
        self.kept += entry[1]

    def update(self, state: str, message: dict[str, Any] | None = None) -> None:
        self.state = state
        self.message = message
        self.updated = _now_ms()
        self.order = next(_updates)
        update = {"taskId": self.id, "contextId": self.context_id, "status": self._status()}
        for queue in self.listeners:
            queue.put_nowait(update)

    def _status(self) -> dict[str, Any]:
        status: dict[str, Any] = {"state": self.state, "timestamp": _timestamp(self.updated)}
        if self.message is not None:
            status["message"] = self.message
        return status

    def task(self, history_length: int | None = None,
             artifacts: bool = True) -> dict[str, Any]:
        """The A2A Task: all its kept history, or the last ``history_length`` messages."""
        task: dict[str, Any] = {"id": self.id, "contextId": self.context_id,
                                "status": self._status()}
        history = [message for message, _ in self.history]
        if history_length is not None:
            history = history[len(history) - history_length:] if history_length else []
        if history:
            task["history"] = history
        if artifacts and self.artifacts:
            task["artifacts"] = [artifact for artifact, _ in self.artifacts]
        return task


def _kept(message: dict[str, Any], fields: tuple[str, ...]) -> tuple[dict[str, Any], int]:
    """What a conversation keeps of ``message``: only ``fields`` (a caller's metadata,
    extensions and the like are not kept), its parts replaced by a note of their size
    when it is over :data:`MAX_KEPT` bytes of JSON; and the bytes that take."""
    message = {k: message[k] for k in fields if k in message}
    text = jsonrpc.dumps(message)
    if len(text) > MAX_KEPT:
        note = {"text": f"({len(text)} bytes, over the {MAX_KEPT} kept of each message)"}
        message = {**message, "parts": [note]}
        text = jsonrpc.dumps(message)  # the ids are bounded (MAX_ID), so this is small
    return message, len(text)


def _answer(result: dict[str, Any], tool: str | None, context_id: str | None,
            message_id: str) -> dict[str, Any]:
    """An agent Message: the result as a data part, and its short text rendering."""
    answer = _data_message(result, context_id, message_id)
    answer["parts"].append({"text": text_calls.render(tool, result),
                            "mediaType": "text/plain"})
    return answer


def _history_length(params: dict[str, Any]) -> int | None:
    length = params.get("historyLength")
    if length is None:
        return None
    if type(length) is not int or length < 0:
        raise RpcError(jsonrpc.INVALID_PARAMS,
                       f"historyLength must be a whole number 0 or more, not {length!r}")
    return length


def _after(params: dict[str, Any]) -> int | None:
    """``statusTimestampAfter`` (``lastUpdatedAfter`` too) in whole milliseconds since
    1970 (the precision of the timestamps shown), or None."""
    given = {k: params[k] for k in ("statusTimestampAfter", "lastUpdatedAfter")
             if params.get(k) is not None}
    if not given:
        return None
    if len(given) > 1:
        raise RpcError(jsonrpc.INVALID_PARAMS,
                       "give statusTimestampAfter or lastUpdatedAfter, not both")
    [(name, value)] = given.items()
    if type(value) is int and value >= 0:  # milliseconds since the epoch
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            when = datetime.fromisoformat(value)
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return (when - _EPOCH) // timedelta(milliseconds=1)
    raise RpcError(jsonrpc.INVALID_PARAMS, f"{name} must be an RFC 3339 timestamp "
                   f"(2026-11-28T21:00:00Z) or milliseconds since 1970, not {value!r}")


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_updates: Final = itertools.count()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _timestamp(ms: int) -> str:
    """RFC 3339, UTC, to the millisecond."""
    return (_EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")[:-6] + "Z"


def _integral(value: Any) -> Any:
    """Whole floats as ints: A2A data parts are protobuf Values, whose numbers are all
    doubles, so an SDK client sends ``"x": 0.0`` for the integer 0 the schema asks for."""
    if type(value) is float and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def _json(body: bytes, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type="application/json")


def _unauthorized(request_id: jsonrpc.Id, text: str) -> Response:
    response = _json(jsonrpc.error(request_id, jsonrpc.UNAUTHENTICATED, text), 401)
    response.headers["www-authenticate"] = 'Bearer realm="barnraise"'
    return response


def _event(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


async def _refusal(error: bytes) -> AsyncIterator[bytes]:
    yield b"event: error\n" + _event(error)


async def _once(request_id: jsonrpc.Id, answer: dict[str, Any]) -> AsyncIterator[bytes]:
    yield _event(jsonrpc.success(request_id, answer))


def _sse(events: AsyncIterator[bytes]) -> StreamingResponse:
    async def guarded() -> AsyncIterator[bytes]:
        # An SSE stream has sent its headers: a fault now is an error event.
        try:
            async for chunk in events:
                yield chunk
        except RpcError as exc:
            yield b"event: error\n" + _event(jsonrpc.error(None, exc.code, exc.message))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            yield b"event: error\n" + _event(jsonrpc.error(None, jsonrpc.INTERNAL_ERROR,
                                                           f"internal error: {exc!r}"))
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()  # type: ignore[attr-defined]

    return StreamingResponse(guarded(), media_type="text/event-stream",
                             headers={"cache-control": "no-store"})
