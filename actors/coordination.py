"""Placeholder: the coordination service is being written."""

from __future__ import annotations

from actors.service import SessionService


class CoordinationService(SessionService):
    service_name = "coordination"
