"""The A2A binding as a generic client meets it (issue 26): text tool calls, POST / as
well as /a2a/jsonrpc, conversations as Tasks, and ListTasks, GetTask, CancelTask and
SSE as A2A 1.0 and the A2A conformance kit (a2a-tck) ask.

CI cannot reach the kit, so each behaviour it checks that barnraise passes is pinned
here, over real sockets, as the kit sends it: raw JSON-RPC at the base URL with a
bearer token from a ``session_join`` written as text. One server serves the module.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pykka
import pytest

from barnraise.gateway import a2a_binding
from barnraise.gateway.a2a_binding import MAX_HISTORY
from barnraise.gateway.hub import Limits
from barnraise.gateway.server import GatewayServer
from barnraise.gateway.text_calls import MAX_RENDER, read_call, render, usage
from barnraise.sim.tools import TOOLS
from tests.gateway_support import counters, get_json, served

FRAME = 64 * 1024  # the module's body bound: small, so the over-the-bound test is cheap
REGION = {"x": 0, "y": 0, "width": 4, "height": 4}
_ids = itertools.count(1)
_http: list[httpx.Client] = []


@pytest.fixture(scope="module")
def server() -> Iterator[GatewayServer]:
    try:
        with served(allowed_hosts=("barn.example",),
                    limits=Limits(max_frame=FRAME)) as running, \
                httpx.Client(timeout=20) as http:
            _http.append(http)  # one keep-alive connection for the module's calls
            yield running
            _http.clear()
    finally:
        pykka.ActorRegistry.stop_all(timeout=5)  # conftest's guarantee, once a module


#: The module's one server keeps its actors across its tests (they stop with it, above;
#: conftest's _stop_every_actor would stop them after each test).
MODULE_SERVER = True


def session_of(server: GatewayServer) -> str:
    session = server.gateway.world.default_session
    assert session is not None
    return session


def text_message(text: str, **fields: Any) -> dict[str, Any]:
    return {"message": {"messageId": f"m-{next(_ids)}", "role": "ROLE_USER",
                        "parts": [{"text": text}], **fields}}


def rpc(server: GatewayServer, method: str, params: dict[str, Any], token: str | None = None,
        path: str = "/", **headers: str) -> tuple[int, dict[str, Any]]:
    sent = {"content-type": "application/json", **headers}
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    answer = _http[0].post(server.url + path, headers=sent, json={
        "jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params})
    return answer.status_code, answer.json()


def ok(server: GatewayServer, method: str, params: dict[str, Any],
       token: str | None = None) -> dict[str, Any]:
    status, body = rpc(server, method, params, token)
    assert status == 200 and "result" in body, body
    result = body["result"]
    assert isinstance(result, dict)
    return result


def refused(server: GatewayServer, method: str, params: dict[str, Any],
            token: str | None = None) -> dict[str, Any]:
    status, body = rpc(server, method, params, token)
    assert status == 200 and "error" in body, body
    error = body["error"]
    assert isinstance(error, dict)
    return error


def parts(message: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """An answer's data part and its text part."""
    [data] = [p["data"] for p in message["parts"] if "data" in p]
    [text] = [p["text"] for p in message["parts"] if "text" in p]
    return data, text


@pytest.fixture(scope="module")
def token(server: GatewayServer) -> str:
    """A member's token, from a session_join written as text at the base URL."""
    task = ok(server, "SendMessage", text_message(
        f"session_join session_id={session_of(server)} agent_name=Texter role=builder"))["task"]
    data, _ = parts(task["status"]["message"])
    assert data["success"], data
    return str(data["token"])


# -- reading text ---------------------------------------------------------------------------


def test_text_is_read_as_a_call_in_either_form() -> None:
    tools = list(TOOLS)
    assert read_call('region_claim region={"x": 0, "y": 0, "width": 4, "height": 4} '
                     'purpose="a wall"  exclusive=true', tools) == (
        "region_claim", {"region": REGION, "purpose": "a wall", "exclusive": True})
    assert read_call("session_join session_id=s1 agent_name=Ann role=builder", tools) == (
        "session_join", {"session_id": "s1", "agent_name": "Ann", "role": "builder"})
    assert read_call('a2a_send_message to=b2 content={"note": "say \\"hi\\" [ok]"} n=-2.5e1',
                     tools) == ("a2a_send_message",
                                {"to": "b2", "content": {"note": 'say "hi" [ok]'}, "n": -25.0})
    assert read_call("region_query", tools) == ("region_query", {})
    assert read_call('{"tool": "region_query", "arguments": {"region": [1]}}', tools) == (
        "region_query", {"region": [1]})
    assert read_call('{"tool": "region_query"}', tools) == ("region_query", {})


@pytest.mark.parametrize("text", [
    "", "   ", "help", "HELP", "please build a wall", "region_paint x=1",
    "region_claim region", "region_claim x=1 x=2", 'region_claim region={"x": 0',
    'region_claim region="open', "region_claim region=[1]y=2",
    "region_claim region=" + "[" * 100 + "]" * 100, '{"tool": "region_claim", "x": 1}',
    '{"tool": 5}', '{"tool": "region_claim", "arguments": []}', "{not json",
    '{"tool": "region_paint"}'])
def test_help_and_what_cannot_be_read_are_no_call(text: str) -> None:
    assert read_call(text, TOOLS) is None


def test_reading_never_raises() -> None:
    rng = random.Random(26)
    alphabet = 'region_claim ={}[]"\\:,x0123456789.-e tn\u00e9\ud800'
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        call = read_call(text, TOOLS)
        assert call is None or (call[0] in TOOLS and isinstance(call[1], dict))


def test_an_answer_reads_briefly_as_text() -> None:
    assert render("region_claim", {"success": True, "claim_id": "c1", "conflicts": []}) == \
        "region_claim ok: claim_id=c1, conflicts=[0 items]"
    assert render("region_claim", {"success": False, "error": "conflict", "message": "held"}) \
        == "region_claim failed: conflict: held"
    assert len(render("session_get_state", {"success": True, **{
        f"k{i}": "v" * 100 for i in range(50)}})) == MAX_RENDER
    assert "session_join session_id=s9" in usage(["a", "b"], "s9")


# -- text over the wire -----------------------------------------------------------------


def test_a_text_join_gives_a_token_and_opens_a_working_task(server: GatewayServer,
                                                            token: str) -> None:
    slot = server.gateway.hub.slot_for_token(token)
    assert slot.session_id == session_of(server)
    [chat] = slot.chats.values()
    assert chat.state == "TASK_STATE_WORKING" and chat.context_id == session_of(server)
    task = ok(server, "GetTask", {"id": chat.id}, token)
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    asked, answered = task["history"]
    assert asked["role"] == "ROLE_USER" and asked["taskId"] == chat.id
    data, text = parts(answered)
    assert answered["role"] == "ROLE_AGENT" and data["agent_id"] == slot.agent_id
    assert text.startswith("session_join ok: agent_id=")
    assert datetime.fromisoformat(task["status"]["timestamp"]).tzinfo is not None


def test_text_calls_act_and_answer_with_data_and_text(server: GatewayServer,
                                                      token: str) -> None:
    claim = ok(server, "SendMessage", text_message(
        'region_claim region={"x": 40, "y": 40, "width": 4, "height": 4} purpose=wall'),
        token)["task"]
    data, text = parts(claim["status"]["message"])
    assert data["success"] and text.startswith("region_claim ok:")
    query = ok(server, "SendMessage", text_message(json.dumps({
        "tool": "region_query", "arguments": {"region": {"x": 40, "y": 40, "width": 4,
                                                          "height": 4}}})), token)["task"]
    found, _ = parts(query["status"]["message"])
    assert data["claim_id"] in json.dumps(found), found  # the claim is in the world
    # a data part is answered with a Message, which carries its text rendering too
    answer = ok(server, "SendMessage", {"message": {
        "messageId": "d1", "role": "ROLE_USER",
        "parts": [{"data": {"tool": "region_query", "arguments": {"region": REGION}}}]}},
        token)
    data, text = parts(answer["message"])
    assert answer["message"]["parts"][0] == {"data": data, "mediaType": "application/json"}
    assert text == render("region_query", data)


def test_a_data_call_comes_before_text_and_text_before_other_data(server: GatewayServer,
                                                                   token: str) -> None:
    query = {"data": {"tool": "region_query", "arguments": {"region": REGION}}}
    both = ok(server, "SendMessage", {"message": {
        "messageId": "b1", "role": "ROLE_USER", "parts": [{"text": "help"}, query]}}, token)
    assert parts(both["message"])[1].startswith("region_query ok")
    other = ok(server, "SendMessage", {"message": {
        "messageId": "b2", "role": "ROLE_USER",
        "parts": [{"data": {"note": 1}}, {"url": "https://x.example/a.png"},
                  {"text": "help"}]}}, token)
    assert parts(other["task"]["status"]["message"])[0]["tools"] == list(TOOLS)
    error = refused(server, "SendMessage", {"message": {
        "messageId": "b3", "role": "ROLE_USER", "parts": [{"data": {"note": 1}}]}}, token)
    assert error["code"] == -32602
    for message in ({"kind": "message"}, {"role": "ROLE_USER", "parts": [{"text": "help"}]},
                    {"messageId": "", "role": "ROLE_USER", "parts": [{"text": "help"}]},
                    {"messageId": "r", "parts": [{"text": "help"}]},
                    {"messageId": "r", "role": "ROLE_UNSPECIFIED", "parts": [{"text": "h"}]},
                    {"messageId": "p", "role": "ROLE_USER", "parts": []},
                    {"messageId": "p", "role": "ROLE_USER", "parts": {"text": "help"}}):
        error = refused(server, "SendMessage", {"message": message}, token)
        assert error["code"] == -32602, message


def test_help_and_unreadable_text_answer_usage_as_a_success(server: GatewayServer,
                                                             token: str) -> None:
    sessions = server.gateway.world.simulation.sessions()
    before = counters(server).get("a2a_help", 0)
    for text in ("help", "please build a wall", 'region_claim region={"x": 0',
                 "region_claim region=" + "[" * 100 + "]" * 100):
        task = ok(server, "SendMessage", text_message(text), token)["task"]
        assert task["status"]["state"] == "TASK_STATE_WORKING"
        data, said = parts(task["status"]["message"])
        assert data["success"] and data["tools"] == list(TOOLS)
        assert "TOOL key=value" in said and "region_claim" in said
    assert counters(server)["a2a_help"] == before + 4
    assert server.gateway.world.simulation.sessions() == sessions


def test_without_a_token_only_a_join_is_served(server: GatewayServer) -> None:
    slots = len(server.gateway.hub.slots)
    for text in ("help", "region_query"):
        status, body = rpc(server, "SendMessage", text_message(text))
        assert status == 401 and body["error"]["code"] == -32040
        assert "session_join session_id=" in body["error"]["message"]
    assert len(server.gateway.hub.slots) == slots


# -- conversations, GetTask, CancelTask --------------------------------------------------


def test_a_conversation_goes_on_under_its_task_until_cancelled(server: GatewayServer,
                                                               token: str) -> None:
    first = ok(server, "SendMessage", text_message("help"), token)["task"]
    for _ in range(2):
        again = ok(server, "SendMessage", text_message("help", taskId=first["id"]),
                   token)["task"]
        assert again["id"] == first["id"] and again["contextId"] == first["contextId"]
    assert len(ok(server, "GetTask", {"id": first["id"]}, token)["history"]) == 6
    last = ok(server, "GetTask", {"id": first["id"], "historyLength": 1}, token)
    assert [m["role"] for m in last["history"]] == ["ROLE_AGENT"]
    assert "history" not in ok(server, "GetTask", {"id": first["id"], "historyLength": 0},
                               token)
    assert refused(server, "GetTask", {"id": first["id"], "historyLength": -1},
                   token)["code"] == -32602
    cancelled = ok(server, "CancelTask", {"id": first["id"]}, token)
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    assert refused(server, "CancelTask", {"id": first["id"]}, token)["code"] == -32002
    assert refused(server, "SendMessage", text_message("help", taskId=first["id"]),
                   token)["code"] == -32004
    slot = server.gateway.hub.slot_for_token(token)
    assert slot.chats[first["id"]].state == "TASK_STATE_CANCELED"


def test_a_task_that_is_not_there_is_task_not_found(server: GatewayServer,
                                                    token: str) -> None:
    for method in ("GetTask", "CancelTask"):
        error = refused(server, method, {"id": "nonexistent-task-id"}, token)
        assert error["code"] == -32001 and "not found" in error["message"]
    error = refused(server, "SendMessage", text_message("help", taskId="nope"), token)
    assert error["code"] == -32001
    assert refused(server, "GetTask", {}, token)["code"] == -32602


def test_history_is_bounded(server: GatewayServer, token: str) -> None:
    task = ok(server, "SendMessage", text_message("help"), token)["task"]
    for _ in range(MAX_HISTORY // 2 + 2):
        ok(server, "SendMessage", text_message("help", taskId=task["id"]), token)
    kept = ok(server, "GetTask", {"id": task["id"]}, token)
    assert len(kept["history"]) == MAX_HISTORY
    ids = [artifact["artifactId"] for artifact in kept["artifacts"]]
    assert len(ids) == MAX_HISTORY // 2 + 3 and len(set(ids)) == len(ids)  # one an answer
    assert ids[-1] == f"{task['id']}-{MAX_HISTORY // 2 + 3}"
    # SendMessage's own configuration.historyLength bounds the Task it answers with
    short = ok(server, "SendMessage", {**text_message("help", taskId=task["id"]),
                                       "configuration": {"historyLength": 1}}, token)["task"]
    assert [m["role"] for m in short["history"]] == ["ROLE_AGENT"]
    slot = server.gateway.hub.slot_for_token(token)
    count = len(slot.chats[task["id"]].history)
    for bad in ({"historyLength": -1}, {"historyLength": "2"}, []):
        error = refused(server, "SendMessage", {**text_message("help", taskId=task["id"]),
                                                "configuration": bad}, token)
        assert error["code"] == -32602
    assert len(slot.chats[task["id"]].history) == count and slot.chats[task["id"]].answers \
        == MAX_HISTORY // 2 + 4  # the refused ones changed nothing


def test_what_a_conversation_keeps_is_bounded(server: GatewayServer, token: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    big = ok(server, "SendMessage", text_message("help " + "x" * 5000), token)["task"]
    asked = ok(server, "GetTask", {"id": big["id"]}, token)["history"][0]
    [note] = asked["parts"]
    assert "over the 4096 kept" in note["text"] and asked["taskId"] == big["id"]
    monkeypatch.setattr(a2a_binding, "MAX_CHATS", 3)
    made = [ok(server, "SendMessage", text_message("help"), token)["task"]["id"]
            for _ in range(4)]
    slot = server.gateway.hub.slot_for_token(token)
    assert list(slot.chats) == made[1:]  # the oldest go first
    assert refused(server, "GetTask", {"id": made[0]}, token)["code"] == -32001
    # a stream on a conversation that goes is ended, not left waiting for ever
    with stream(server, "SubscribeToTask", {"id": made[1]}, token) as answer:
        seen = events(answer)
        assert next(seen)[1]["result"]["task"]["id"] == made[1]
        ok(server, "SendMessage", text_message("help"), token)  # made[1] is the oldest
        assert list(seen) == []
    assert made[1] not in slot.chats and slot.streams == 0


def test_a_conversation_keeps_only_a_messages_ids_role_and_parts(server: GatewayServer,
                                                                  token: str) -> None:
    pad = "x" * 20_000
    task = ok(server, "SendMessage", text_message(
        "help", metadata={"pad": pad}, extensions=[pad], referenceTaskIds=[pad]),
        token)["task"]
    slot = server.gateway.hub.slot_for_token(token)
    chat = slot.chats[task["id"]]
    (asked, size), _ = chat.history
    assert set(asked) == {"messageId", "role", "parts", "taskId", "contextId"}
    assert size == len(json.dumps(asked, separators=(",", ":"))) < 4096
    assert chat.kept == sum(n for _, n in chat.history) + sum(n for _, n in chat.artifacts)
    # a caller's ids are bounded in length, refused before anything is kept
    held = server.gateway.hub.held()
    for field in ("contextId", "messageId"):
        error = refused(server, "SendMessage", text_message("help", **{field: "c" * 257}),
                        token)
        assert error["code"] == -32602 and field in error["message"], error
    assert server.gateway.hub.held() == held


def test_all_agents_conversations_are_bounded_together(server: GatewayServer, token: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"Limits\.conversation_bytes must be a positive int"):
        Limits(conversation_bytes=0)
    hub = server.gateway.hub
    other = ok(server, "SendMessage", text_message(
        f"session_join session_id={session_of(server)} agent_name=Other role=builder"))["task"]
    data, _ = parts(other["status"]["message"])
    mine, theirs = hub.slot_for_token(token), hub.slot_for_token(data["token"])
    assert other["id"] in theirs.chats
    held = hub.held()
    assert held["conversations"] == len(mine.chats) + len(theirs.chats)
    assert held["conversation_bytes"] == sum(c.kept for s in (mine, theirs)
                                             for c in s.chats.values())
    # with room for less than a conversation, each answer pushes out every other one,
    # of any agent, oldest first; the one just answered stays (bounded on its own)
    monkeypatch.setattr(hub, "limits", Limits(max_frame=FRAME, conversation_bytes=1))
    first = ok(server, "SendMessage", text_message("help"), token)["task"]["id"]
    assert list(mine.chats) == [first] and not theirs.chats
    assert hub.held()["conversations"] == 1
    assert hub.held()["conversation_bytes"] == mine.chats[first].kept
    second = ok(server, "SendMessage", text_message("help"), data["token"])["task"]["id"]
    assert not mine.chats and list(theirs.chats) == [second]
    assert hub.held()["conversation_bytes"] == theirs.chats[second].kept
    # an agent that expires takes its conversations with it (on the hub's loop)
    async def expire() -> bool:
        return hub.expire(theirs)
    assert hub._loop is not None
    assert asyncio.run_coroutine_threadsafe(expire(), hub._loop).result(timeout=10)
    assert hub.held()["conversations"] == 0 and hub.held()["conversation_bytes"] == 0


# -- ListTasks ----------------------------------------------------------------------------


def test_list_tasks_pages_filters_and_sorts(server: GatewayServer, token: str) -> None:
    context = f"ctx-{time.time_ns()}"
    made = [ok(server, "SendMessage", text_message("help", contextId=context), token)["task"]
            for _ in range(55)]
    listed = ok(server, "ListTasks", {"contextId": context}, token)
    assert listed["totalSize"] == 55 and listed["pageSize"] == 50
    assert len(listed["tasks"]) == 50 and listed["nextPageToken"]
    # newest first; then the rest on the next page, and the last page says so
    assert [t["id"] for t in listed["tasks"]] == [t["id"] for t in reversed(made)][:50]
    rest = ok(server, "ListTasks", {"contextId": context,
                                    "pageToken": listed["nextPageToken"]}, token)
    assert len(rest["tasks"]) == 5 and rest["pageSize"] == 5 and rest["nextPageToken"] == ""
    page = ok(server, "ListTasks", {"contextId": context, "pageSize": 20}, token)
    assert page["pageSize"] == 20 and page["totalSize"] == 55
    # no history, no artifacts unless asked
    assert all("artifacts" not in t and "history" not in t for t in listed["tasks"])
    full = ok(server, "ListTasks", {"contextId": context, "pageSize": 1,
                                    "includeArtifacts": True, "historyLength": 1}, token)
    [one] = full["tasks"]
    assert len(one["artifacts"]) == 1 and len(one["history"]) == 1
    # an unknown context is an empty page
    assert ok(server, "ListTasks", {"contextId": "no-such-context"}, token) == {
        "tasks": [], "nextPageToken": "", "pageSize": 0, "totalSize": 0}
    # status and time filters
    ok(server, "CancelTask", {"id": made[0]["id"]}, token)
    cancelled = ok(server, "ListTasks", {"contextId": context,
                                         "status": "TASK_STATE_CANCELED"}, token)
    assert [t["id"] for t in cancelled["tasks"]] == [made[0]["id"]]
    working = ok(server, "ListTasks", {"contextId": context, "status": "TASK_STATE_WORKING"},
                 token)
    assert working["totalSize"] == 54
    cut = made[40]["status"]["timestamp"]
    after = ok(server, "ListTasks", {"contextId": context, "statusTimestampAfter": cut}, token)
    stamps = [t["status"]["timestamp"] for t in after["tasks"]]
    assert made[0]["id"] in {t["id"] for t in after["tasks"]}  # cancelled since: updated
    assert all(datetime.fromisoformat(s) > datetime.fromisoformat(cut) for s in stamps)
    millis = int(datetime.fromisoformat(cut).timestamp() * 1000) + 1
    assert ok(server, "ListTasks", {"contextId": context, "lastUpdatedAfter": millis},
              token)["totalSize"] <= after["totalSize"]


@pytest.mark.parametrize("params", [
    {"pageSize": 0}, {"pageSize": -1}, {"pageSize": 101}, {"pageSize": "5"},
    {"pageSize": 2.5}, {"pageToken": "invalid-token-xyz"}, {"pageToken": "999999"},
    {"status": "INVALID_STATUS"}, {"historyLength": -1}, {"statusTimestampAfter": "-1"},
    {"statusTimestampAfter": "yesterday"}, {"lastUpdatedAfter": -5},
    {"statusTimestampAfter": "2026-01-01T00:00:00Z", "lastUpdatedAfter": 1},
    {"includeArtifacts": "yes"}, {"contextId": 7}])
def test_list_tasks_refuses_bad_params(server: GatewayServer, token: str,
                                       params: dict[str, Any]) -> None:
    error = refused(server, "ListTasks", params, token)
    assert error["code"] == -32602 and error["message"]


def test_list_tasks_shows_the_sessions_tasks_after_the_conversations(
        server: GatewayServer) -> None:
    role_token = server.gateway.world.role_tokens["architect"]
    joined = ok(server, "SendMessage", text_message(
        f"session_join session_id={session_of(server)} agent_name=Archie role=architect "
        f"role_token={role_token}"))["task"]
    token = parts(joined["status"]["message"])[0]["token"]
    delegated = ok(server, "SendMessage", text_message(
        "task_delegate task_type=build description=wall"), token)["task"]
    data, _ = parts(delegated["status"]["message"])
    assert data["success"], data
    listed = ok(server, "ListTasks", {"contextId": session_of(server), "pageSize": 100},
                token)
    ids = [t["id"] for t in listed["tasks"]]
    assert data["task_id"] in ids and delegated["id"] in ids
    assert ids.index(delegated["id"]) < ids.index(data["task_id"])
    world_task = ok(server, "GetTask", {"id": data["task_id"]}, token)
    assert world_task["status"]["state"] == "TASK_STATE_SUBMITTED"
    # cancelling a world task is reporting it cancelled, as the policy lets the caller
    outsider = ok(server, "SendMessage", text_message(
        f"session_join session_id={session_of(server)} agent_name=Outsider"))["task"]
    other = parts(outsider["status"]["message"])[0]["token"]
    error = refused(server, "CancelTask", {"id": data["task_id"]}, other)
    assert error["code"] == -32002 and error["data"]["success"] is False
    assert ok(server, "GetTask", {"id": data["task_id"]}, token)["status"]["state"] == \
        "TASK_STATE_SUBMITTED"
    cancelled = ok(server, "CancelTask", {"id": data["task_id"]}, token)
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    assert refused(server, "CancelTask", {"id": data["task_id"]}, token)["code"] == -32002


# -- SSE ----------------------------------------------------------------------------------


def events(answer: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event name, data) of an SSE stream, as they come."""
    name = "message"
    for line in answer.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            yield name, json.loads(line[6:])
            name = "message"


def stream(server: GatewayServer, method: str, params: dict[str, Any],
           token: str) -> Any:
    return httpx.stream("POST", server.url + "/", timeout=20, json={
        "jsonrpc": "2.0", "id": 5, "method": method, "params": params},
        headers={"content-type": "application/json", "accept": "text/event-stream",
                 "authorization": f"Bearer {token}"})


def test_streams_carry_sse_headers_and_a2a_events(server: GatewayServer, token: str) -> None:
    with stream(server, "SendStreamingMessage", text_message("help"), token) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert answer.headers["cache-control"] == "no-store"
        [(name, event)] = list(events(answer))
    assert name == "message" and event["id"] == 5
    task = event["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    with stream(server, "SubscribeToTask", {"id": task["id"]}, token) as answer:
        seen = events(answer)
        assert next(seen)[1]["result"]["task"]["id"] == task["id"]
        ok(server, "SendMessage", text_message("help", taskId=task["id"]), token)
        update = next(seen)[1]["result"]["statusUpdate"]
        assert update["taskId"] == task["id"] and update["contextId"] == task["contextId"]
        assert update["status"]["state"] == "TASK_STATE_WORKING"
        assert parts(update["status"]["message"])[0]["tools"] == list(TOOLS)
        ok(server, "CancelTask", {"id": task["id"]}, token)
        update = next(seen)[1]["result"]["statusUpdate"]
        assert update["status"]["state"] == "TASK_STATE_CANCELED"
        assert list(seen) == []  # a terminal state ends the stream
    slot = server.gateway.hub.slot_for_token(token)
    assert slot.chats[task["id"]].listeners == set() and slot.streams == 0


def test_a_stream_asked_for_a_missing_task_gets_an_error_event(server: GatewayServer,
                                                               token: str) -> None:
    with stream(server, "SubscribeToTask", {"id": "nonexistent-task-id"}, token) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        [(name, event)] = list(events(answer))
    assert name == "error" and event["error"]["code"] == -32001
    assert "not found" in event["error"]["message"]
    # asked without an SSE Accept, the same refusal is plain JSON
    assert refused(server, "SubscribeToTask", {"id": "nonexistent-task-id"},
                   token)["code"] == -32001


# -- the base URL under the edge rules ---------------------------------------------------


def post_root(server: GatewayServer, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(server.url + "/", content=body, timeout=20,
                      headers={"content-type": "application/json", **headers})


JOIN = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": text_message(
    "session_create session_name=evil")}).encode()


@pytest.fixture
def unchanged(server: GatewayServer) -> Iterator[None]:
    """The world and the hub are as they were after the test's refusals."""
    sessions, slots = len(server.gateway.world.sessions()), len(server.gateway.hub.slots)
    yield
    assert len(server.gateway.world.sessions()) == sessions
    assert len(server.gateway.hub.slots) == slots


def test_root_refuses_a_foreign_host(server: GatewayServer, unchanged: None) -> None:
    answer = post_root(server, JOIN, host=f"evil.example:{server.port}")
    assert answer.status_code == 421 and "evil.example" in answer.text
    assert post_root(server, b"{}", host="barn.example").status_code == 200  # allowed


def test_root_refuses_a_foreign_origin(server: GatewayServer, unchanged: None) -> None:
    before = counters(server).get("foreign_origin", 0)
    assert post_root(server, JOIN, origin="https://evil.example").status_code == 403
    assert counters(server)["foreign_origin"] == before + 1


@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded",
                                  "multipart/form-data; boundary=x"])
def test_root_refuses_a_body_that_is_not_json(server: GatewayServer, unchanged: None,
                                              kind: str) -> None:
    answer = post_root(server, JOIN, **{"content-type": kind})
    assert answer.status_code == 415 and "application/json" in answer.text


def test_root_refuses_a_missing_or_forged_token(server: GatewayServer,
                                                unchanged: None) -> None:
    query = {"message": {"messageId": "q", "role": "ROLE_USER", "parts": [
        {"data": {"tool": "region_query", "arguments": {"region": REGION}}}]}}
    status, body = rpc(server, "SendMessage", query)
    assert status == 401 and body["error"]["code"] == -32040
    status, body = rpc(server, "SendMessage", query, "forged")
    assert status == 401 and "unknown token" in body["error"]["message"]
    for method in ("GetTask", "ListTasks", "CancelTask"):
        assert rpc(server, method, {"id": "x"})[0] == 401


def test_root_bounds_a_body_before_reading_it(server: GatewayServer, unchanged: None) -> None:
    before = counters(server).get("body_too_large", 0)
    big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                      "params": text_message("help " + "x" * FRAME)}).encode()
    answer = post_root(server, big)
    assert answer.status_code == 413 and answer.json()["error"]["code"] == -32600
    assert counters(server)["body_too_large"] == before + 1


def test_root_refuses_deep_and_non_utf8_bodies(server: GatewayServer, unchanged: None) -> None:
    answer = post_root(server, b"[" * 10_000 + b"]" * 10_000).json()
    assert answer["error"]["code"] == -32600 and "deep" in answer["error"]["message"]
    not_utf8 = b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"x": "\xff"}}'
    assert post_root(server, not_utf8).json()["error"]["code"] == -32700
    assert post_root(server, b"{nope").json()["error"]["code"] == -32700
    assert post_root(server, b'{"jsonrpc": "1.0", "id": 1}').json()["error"]["code"] == -32600


def test_the_card_names_the_canonical_url_and_text(server: GatewayServer) -> None:
    card = get_json(server.url + "/.well-known/agent-card.json")
    [jsonrpc] = [i for i in card["supportedInterfaces"] if i["protocolBinding"] == "JSONRPC"]
    assert jsonrpc["url"] == server.url + "/a2a/jsonrpc"
    assert card["defaultInputModes"] == ["text/plain", "application/json"]
    assert all("text/plain" in skill["inputModes"] for skill in card["skills"])
    assert "session_join" in card["description"]
    # the base URL takes only the binding's POST (a served view adds its page's GET)
    assert httpx.get(server.url + "/", timeout=10).status_code == 405
