"""Placeholder: the regions service is being written."""

from __future__ import annotations

from actors.service import SessionService


class RegionManager(SessionService):
    service_name = "regions"
