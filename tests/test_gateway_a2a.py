"""The A2A JSON-RPC binding, driven by the official a2a-sdk 1.x client over real sockets."""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    ContentTypeNotSupportedError,
    GetTaskRequest,
    InvalidParamsError,
    ListTasksRequest,
    Message,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskNotFoundError,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict

from barnraise.gateway.server import GatewayServer
from tests.gateway_support import counters, served

_ids = itertools.count(1)
REGION = {"x": 0, "y": 0, "width": 8, "height": 8}


def user_message(data: Any = None, text: str | None = None) -> Message:
    parts: list[dict[str, Any]] = []
    if data is not None:
        parts.append({"data": data})
    if text is not None:
        parts.append({"text": text})
    return ParseDict({"messageId": f"msg-{next(_ids)}", "role": "ROLE_USER", "parts": parts},
                     Message())


@asynccontextmanager
async def a2a_client(url: str, token: str | None = None,
                     streaming: bool = False) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=20) as http:
        factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
        client = await factory.create_from_url(url)
        try:
            yield client
        finally:
            await client.close()


async def responses(client: Client, message: Message) -> list[StreamResponse]:
    return [event async for event in client.send_message(SendMessageRequest(message=message))]


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    [event] = await responses(client, user_message({"tool": tool, "arguments": arguments}))
    assert event.HasField("message"), event
    data = MessageToDict(event.message)["parts"][0]["data"]
    assert isinstance(data, dict)
    return data


async def join(url: str, session_id: str, name: str, role: str, **extra: Any) -> str:
    async with a2a_client(url) as client:
        joined = await call(client, "session_join", session_id=session_id, agent_name=name,
                            role=role, **extra)
    assert joined["success"], joined
    return str(joined["token"])


def run(scenario: Coroutine[Any, Any, None]) -> None:
    """Run a test's client side, bounded (one task: the SDK's streams stay in it)."""
    asyncio.run(asyncio.wait_for(scenario, 60))


@pytest.fixture
def server() -> Any:
    with served() as running:
        yield running


def default_session(server: GatewayServer) -> str:
    session = server.gateway.world.default_session
    assert session is not None
    return session


def test_send_message_calls_tools_and_task_delegate_answers_with_a_task(
        server: GatewayServer) -> None:
    session = default_session(server)

    async def scenario() -> None:
        architect = await join(server.url, session, "Arch", "architect",
                               role_token=server.gateway.world.role_tokens["architect"])
        builder = await join(server.url, session, "Bob", "builder")
        async with a2a_client(server.url, architect) as arch, \
                a2a_client(server.url, builder) as bob:
            claim = await call(bob, "region_claim", region=REGION)
            assert claim["success"] and claim["region"] == REGION, claim
            refused = await call(bob, "task_accept", task_id="task_nope")
            assert refused == {**refused, "success": False, "error": "task_not_found"}

            [event] = await responses(arch, user_message(
                {"tool": "task_delegate", "arguments": {
                    "task_type": "build", "region": {"x": 20, "y": 20, "width": 4, "height": 4},
                    "description": "a wall"}}))
            assert event.HasField("task")
            task = event.task
            assert task.status.state == TaskState.TASK_STATE_SUBMITTED
            assert task.context_id == session and task.id.startswith("task_")
            delegated = MessageToDict(task.status.message)["parts"][0]["data"]
            assert delegated["task_id"] == task.id and delegated["success"]

            fetched = await arch.get_task(GetTaskRequest(id=task.id))
            assert fetched.status.state == TaskState.TASK_STATE_SUBMITTED
            assert (await call(bob, "task_accept", task_id=task.id))["success"]
            fetched = await arch.get_task(GetTaskRequest(id=task.id))
            assert fetched.status.state == TaskState.TASK_STATE_WORKING
            assert (await call(bob, "task_report", task_id=task.id, status="completed",
                               result={"bricks": 16}))["success"]
            fetched = await arch.get_task(GetTaskRequest(id=task.id))
            assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
            [artifact] = fetched.artifacts
            assert MessageToDict(artifact)["parts"][0]["data"] == {"bricks": 16}

            listed = await arch.list_tasks(ListTasksRequest(
                status=TaskState.TASK_STATE_COMPLETED))
            assert [t.id for t in listed.tasks] == [task.id]
            with pytest.raises(TaskNotFoundError, match="task_missing"):
                await arch.get_task(GetTaskRequest(id="task_missing"))

    run(scenario())


def test_streaming_follows_a_task_to_its_terminal_state(server: GatewayServer) -> None:
    session = default_session(server)

    async def scenario() -> None:
        architect = await join(server.url, session, "Arch", "architect",
                               role_token=server.gateway.world.role_tokens["architect"])
        builder = await join(server.url, session, "Bob", "builder")
        async with a2a_client(server.url, architect, streaming=True) as arch, \
                a2a_client(server.url, builder) as bob:
            stream = arch.send_message(SendMessageRequest(message=user_message(
                {"tool": "task_delegate", "arguments": {
                    "task_type": "build", "region": {"x": 40, "y": 0, "width": 4,
                                                     "height": 4}}})))
            first = await anext(stream)
            assert first.HasField("task")
            task_id = first.task.id
            states = [first.task.status.state]

            async def work() -> None:
                assert (await call(bob, "task_accept", task_id=task_id))["success"]
                assert (await call(bob, "task_report", task_id=task_id,
                                   status="completed"))["success"]

            worker = asyncio.create_task(work())
            async for event in stream:
                assert event.HasField("status_update")
                assert event.status_update.task_id == task_id
                states.append(event.status_update.status.state)
            await worker
            assert states == [TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING,
                              TaskState.TASK_STATE_COMPLETED]

            # SubscribeToTask on a second task, which is then cancelled.
            async with a2a_client(server.url, architect) as arch_polling:
                [event] = await responses(arch_polling, user_message(
                    {"tool": "task_delegate", "arguments": {"task_type": "test"}}))
            second = event.task.id
            subscription = arch.subscribe(SubscribeToTaskRequest(id=second))
            opening = await anext(subscription)
            assert opening.task.status.state == TaskState.TASK_STATE_SUBMITTED
            cancelled = await arch.cancel_task(CancelTaskRequest(id=second))
            assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
            rest = [e.status_update.status.state async for e in subscription]
            assert rest == [TaskState.TASK_STATE_CANCELED]

    run(scenario())


def test_a_message_without_a_usable_part_gets_a_clear_a2a_error(
        server: GatewayServer) -> None:
    session = default_session(server)

    async def scenario() -> None:
        token = await join(server.url, session, "Bob", "builder")
        async with a2a_client(server.url, token) as bob:
            with pytest.raises(ContentTypeNotSupportedError, match="text part"):
                await responses(bob, ParseDict({"messageId": "f1", "role": "ROLE_USER",
                                                "parts": [{"url": "https://x.example/a.png"}]},
                                               Message()))
            # text is read (tests/test_gateway_a2a_text.py): what is not a call gets help
            [event] = await responses(bob, user_message(text="please build a wall"))
            assert event.HasField("task"), event
            helped = MessageToDict(event.task.status.message)["parts"]
            assert helped[0]["data"]["success"] and "TOOL key=value" in helped[1]["text"]
            with pytest.raises(InvalidParamsError, match="tool"):
                await responses(bob, user_message({"build": "a wall"}))
            with pytest.raises(InvalidParamsError, match="arguments"):
                await responses(bob, user_message({"tool": "region_query", "arguments": [1]}))
            unknown = await call(bob, "region_paint", region=REGION)
            assert unknown["error"] == "unknown_tool"

    run(scenario())
    assert counters(server)["invalid_params"] == 2


def test_calls_without_a_valid_token_are_refused_and_counted(server: GatewayServer) -> None:
    def post(body: dict[str, Any], token: str | None) -> tuple[int, dict[str, Any]]:
        headers = {"content-type": "application/json"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        request = urllib.request.Request(server.url + "/a2a/jsonrpc", json.dumps(body).encode(),
                                         headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    send = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m1", "role": "ROLE_USER",
        "parts": [{"data": {"tool": "region_query", "arguments": {"region": REGION}}}]}}}
    status, body = post(send, None)
    assert status == 401 and body["error"]["code"] == -32040
    status, body = post(send, "forged-token")
    assert status == 401 and "unknown token" in body["error"]["message"]
    status, body = post({"jsonrpc": "2.0", "id": 2, "method": "GetTask",
                         "params": {"id": "task_x"}}, None)
    assert status == 401
    status, body = post({"jsonrpc": "2.0", "id": 3, "method": "Nope"}, None)
    assert body["error"]["code"] == -32601
    big = {**send, "params": {"pad": "x" * (server.gateway.hub.limits.max_frame + 1)}}
    try:
        status, body = post(big, None)
        assert status == 413  # as on /mcp
        assert body["error"]["code"] == -32600 and "too large" in body["error"]["message"]
    except urllib.error.URLError as exc:
        # The server answers on the declared length and stops reading: the rest of
        # the upload may meet a closed socket first.
        assert isinstance(exc.reason, (BrokenPipeError, ConnectionResetError)), exc
    found = counters(server)
    assert found["unauthenticated"] == 2 and found["invalid_token"] == 1
    assert found["body_too_large"] == 1 and found["unknown_method"] == 1


def test_failed_joins_leave_no_agent_behind() -> None:
    """Every failed join over HTTP once kept a Client (and its thread): Limits.agents of
    them and the server refused everyone."""
    from barnraise.gateway.hub import Limits

    with served(limits=Limits(agents=3)) as server:
        session = default_session(server)
        hub, dispatcher = server.gateway.hub, server.gateway.world.simulation.dispatcher

        async def scenario() -> None:
            async with a2a_client(server.url) as client:
                for attempt in range(6):  # twice the limit
                    refused = await call(client, "session_join", session_id=session,
                                         agent_name=f"Climber{attempt}", role="architect")
                    assert refused["error"] == "permission_denied", refused
            assert await join(server.url, session, "Welcome", "builder")

        run(scenario())
        assert counters(server)["guests_released"] == 6
        assert [slot.session_id for slot in hub.slots.values()] == [session]
        stopped = [name for name, actor in dispatcher.actors.items()
                   if name.startswith("remote-") and actor.stopped]
        assert len(stopped) == 6
