"""The errors a behaviour's waits raise: a timeout, an undelivered request, a refusal."""

from __future__ import annotations

from barnraise.sim.dispatch.values import SendReport
from barnraise.sim.messages import Message

__all__ = ["DeliveryError", "RequestError", "WaitTimeout"]


class WaitTimeout(TimeoutError):
    """A request, receive or other wait ran past its timeout."""


class DeliveryError(RuntimeError):
    """A request could not be delivered (unknown, offline or full recipient)."""

    def __init__(self, report: SendReport) -> None:
        super().__init__(f"request not delivered: {report.statuses}")
        self.report = report


class RequestError(RuntimeError):
    """The other side answered a request with an ``error_report``."""

    def __init__(self, reply: Message) -> None:
        content = reply.content
        code = content.get("error_code") or content.get("error") or "error"
        super().__init__(f"{reply.from_agent} answered with {code}: {content.get('detail', '')}")
        self.reply = reply
        self.code = code
