"""The registry: who is in the run, what they can do, and whether they are alive.

It owns the agent records (type, capabilities, region, status, last
heartbeat) and nothing else. Agents talk to it with ``registry_query``
messages whose ``content["op"]`` is one of:

``register``   agent_type, capabilities, region, heartbeat_interval (the sender
               registers itself; only agents that give an interval are supervised)
``unregister`` -
``discover``   agent_type, capability, region_overlaps, status: all optional filters
``set_status`` status: idle | busy | waiting | error
``get``        agent_id

and with ``heartbeat`` messages. A query that carries a correlation id gets a
``registry_response`` (or an ``error_report`` naming the bad field).

Every ``check_interval`` seconds the registry looks at the agents that promised
heartbeats: one not heard from for ``missed_limit`` (default 3) of its own
intervals is marked ``offline``: the dispatcher
stops delivering to it and an ``agent_offline`` event is published on the
``registry:events`` topic. A heartbeat from it brings it back (``agent_online``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from barnraise.actors.base import A2AActor
from barnraise.actors.supervisor import ROOT, Supervisor
from barnraise.sim.events import AgentOffline, AgentOnline
from barnraise.sim.messages import Message

__all__ = ["STATUSES", "AgentRecord", "Registry"]

STATUSES: Final = ("idle", "busy", "waiting", "error", "offline")
EVENTS_TOPIC: Final = "registry:events"
#: Every agent registers, heartbeats and leaves through this one mailbox, so a
#: burst of joins is as large as the run: the default bound of 1,000 would turn
#: it into dropped registrations.
HUB_CAPACITY: Final = 1_000_000
#: Realtime mode: wall seconds of silence before an agent is offline, at the least. At a
#: high time scale three missed intervals are a few wall milliseconds, which a busy
#: machine (threads waiting for a core) takes without any agent being gone.
MIN_WALL_SILENCE: Final = 1.0


@dataclass(slots=True)
class AgentRecord:
    agent_id: str
    agent_type: str
    capabilities: tuple[str, ...]
    region: tuple[int, int, int, int] | None
    status: str
    last_heartbeat: float
    registered_at: float
    heartbeat_interval: float | None = None

    def to_dict(self) -> dict[str, Any]:
        region = None
        if self.region is not None:
            x, y, w, h = self.region
            region = {"x": x, "y": y, "width": w, "height": h}
        return {
            "agent_id": self.agent_id, "agent_type": self.agent_type,
            "capabilities": list(self.capabilities), "region": region, "status": self.status,
            "last_heartbeat": self.last_heartbeat, "registered_at": self.registered_at,
            "heartbeat_interval": self.heartbeat_interval,
        }


class _BadQuery(ValueError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


def _region(value: Any, field: str) -> tuple[int, int, int, int]:
    if not isinstance(value, dict):
        raise _BadQuery(field, f"expected an object with x, y, width, height, got {value!r}")
    try:
        parts = tuple(value[k] for k in ("x", "y", "width", "height"))
    except KeyError as exc:
        raise _BadQuery(f"{field}.{exc.args[0]}", "missing") from None
    for key, part in zip(("x", "y", "width", "height"), parts, strict=True):
        if type(part) is not int:
            raise _BadQuery(f"{field}.{key}", f"expected an int, got {part!r}")
    if parts[2] < 1 or parts[3] < 1:
        raise _BadQuery(field, "width and height must be at least 1")
    return parts[0], parts[1], parts[2], parts[3]


def _overlaps(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


class Registry(A2AActor):
    """Agent records, discovery and heartbeat supervision (a service, not an agent)."""

    def __init__(
        self,
        *,
        check_interval: float | None = 1.0,
        missed_limit: int = 3,
        mailbox_capacity: int = HUB_CAPACITY,
    ) -> None:
        super().__init__(mailbox_capacity=mailbox_capacity)
        if check_interval is not None and not check_interval > 0:
            raise ValueError(f"check_interval must be > 0, got {check_interval!r}")
        if missed_limit < 1:
            raise ValueError(f"missed_limit must be >= 1, got {missed_limit!r}")
        self.check_interval = check_interval
        self.missed_limit = missed_limit
        self.records: dict[str, AgentRecord] = {}
        self._supervised: dict[str, AgentRecord] = {}

    def on_start(self) -> None:
        if self.check_interval:
            self.dispatcher.call_every(self.check_interval, self, self._check_heartbeats)

    # -- handlers ---------------------------------------------------------------------

    def handle_registry_query(self, message: Message) -> None:
        op = message.content.get("op")
        handler = self._ops.get(op) if isinstance(op, str) else None
        if handler is None:
            self.reply_error(message, "invalid_argument",
                             f"op: unknown operation {op!r}; expected one of {sorted(self._ops)}",
                             field="op")
            return
        try:
            result = handler(self, message)
        except _BadQuery as exc:
            self.reply_error(message, "invalid_argument", str(exc), field=exc.field)
            return
        if message.metadata.correlation_id is not None:
            self.reply(message, "registry_response", result)

    def handle_heartbeat(self, message: Message) -> None:
        record = self.records.get(message.from_agent)
        if record is None:
            return
        record.last_heartbeat = self.now
        if record.status == "offline":
            record.status = "idle"
            self.dispatcher.set_online(record.agent_id, True)
            self.emit(EVENTS_TOPIC, AgentOnline(agent_id=record.agent_id))

    # -- operations -------------------------------------------------------------------

    def _register(self, message: Message) -> dict[str, Any]:
        content = message.content
        agent_type = content.get("agent_type")
        if not isinstance(agent_type, str) or not agent_type:
            raise _BadQuery("agent_type", f"expected a non-empty string, got {agent_type!r}")
        capabilities = content.get("capabilities", [])
        if not isinstance(capabilities, list) or not all(isinstance(c, str) for c in capabilities):
            raise _BadQuery("capabilities", f"expected a list of strings, got {capabilities!r}")
        region = content.get("region")
        parsed = None if region is None else _region(region, "region")
        interval = content.get("heartbeat_interval")
        if interval is not None and (type(interval) not in (int, float) or not interval > 0):
            raise _BadQuery("heartbeat_interval", f"expected a positive number, got {interval!r}")
        now = self.now
        record = AgentRecord(message.from_agent, agent_type, tuple(capabilities), parsed, "idle",
                             now, now, interval)
        self.records[record.agent_id] = record
        if interval is not None:
            self._supervised[record.agent_id] = record
        return {"registered": True, "agent_id": message.from_agent}

    def _unregister(self, message: Message) -> dict[str, Any]:
        self._supervised.pop(message.from_agent, None)
        return {"unregistered": self.records.pop(message.from_agent, None) is not None}

    def _discover(self, message: Message) -> dict[str, Any]:
        content = message.content
        agent_type = content.get("agent_type")
        capability = content.get("capability")
        status = content.get("status")
        overlap = content.get("region_overlaps")
        region = None if overlap is None else _region(overlap, "region_overlaps")
        if status is not None and status not in STATUSES:
            raise _BadQuery("status", f"expected one of {list(STATUSES)}, got {status!r}")
        found = [
            r.to_dict() for r in self.records.values()
            if (agent_type is None or r.agent_type == agent_type)
            and (capability is None or capability in r.capabilities)
            and (status is None or r.status == status)
            and (region is None or (r.region is not None and _overlaps(r.region, region)))
        ]
        return {"agents": found, "count": len(found)}

    def _set_status(self, message: Message) -> dict[str, Any]:
        status = message.content.get("status")
        if status not in STATUSES or status == "offline":
            raise _BadQuery("status", f"expected idle, busy, waiting or error, got {status!r}")
        record = self.records.get(message.from_agent)
        if record is None:
            raise _BadQuery("agent_id", f"{message.from_agent!r} is not registered")
        record.status = status
        record.last_heartbeat = self.now
        return {"agent_id": record.agent_id, "status": status}

    def _get(self, message: Message) -> dict[str, Any]:
        agent_id = message.content.get("agent_id")
        record = self.records.get(agent_id) if isinstance(agent_id, str) else None
        if record is None:
            raise _BadQuery("agent_id", f"no agent {agent_id!r} is registered")
        return record.to_dict()

    _ops = {
        "register": _register,
        "unregister": _unregister,
        "discover": _discover,
        "set_status": _set_status,
        "get": _get,
    }

    # -- supervision ----------------------------------------------------------------------

    def _check_heartbeats(self) -> None:
        now = self.now
        # simulated seconds that are MIN_WALL_SILENCE wall ones (0 when time is not wall time)
        floor = MIN_WALL_SILENCE * getattr(self.dispatcher.clock, "time_scale", 0.0)
        for record in self._supervised.values():
            assert record.heartbeat_interval is not None
            limit = max(self.missed_limit * record.heartbeat_interval, floor)
            if record.status != "offline" and now - record.last_heartbeat > limit:
                record.status = "offline"
                self.dispatcher.set_online(record.agent_id, False)
                self.emit(EVENTS_TOPIC, AgentOffline(agent_id=record.agent_id,
                                                     last_heartbeat=record.last_heartbeat))
                # A supervised agent that went silent is treated as crashed: its
                # supervisor restarts it (actors/supervisor.py). Others may come back
                # online with a heartbeat, as before.
                supervisor = self.dispatcher.actors.get(ROOT)
                if isinstance(supervisor, Supervisor) and supervisor.supervises(record.agent_id):
                    self.dispatcher.crash(record.agent_id, "offline")
