"""Small actors the tests share."""

from __future__ import annotations

from typing import Any

from actors.base import A2AActor, Agent
from sim.messages import Message


class Recorder(Agent):
    """Keeps every message no behaviour or handler took, in arrival order."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.got: list[Message] = []

    def handle_message(self, message: Message) -> None:
        self.got.append(message)

    def contents(self, key: str) -> list[Any]:
        return [m.content.get(key) for m in self.got]


class Echo(Agent):
    """Answers every task_assignment with a task_result carrying the same content."""

    def handle_task_assignment(self, message: Message) -> None:
        self.reply(message, "task_result", dict(message.content))


class Service(A2AActor):
    """A service actor (no agent type): not reached by broadcasts."""

    def __init__(self) -> None:
        super().__init__()
        self.got: list[Message] = []

    def handle_message(self, message: Message) -> None:
        self.got.append(message)
