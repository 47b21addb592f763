"""Placeholder: the tasks service is being written."""

from __future__ import annotations

from actors.service import SessionService


class TaskQueue(SessionService):
    service_name = "tasks"
