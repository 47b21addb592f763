"""Who may drive a served world: its operator, known by a token.

``barnraise serve`` makes one (``secrets.token_urlsafe``, or the environment's
``BARNRAISE_OPERATOR_TOKEN``) and prints it on stderr beside the role tokens. The
token is what the view's controls (``view.control`` with ``params.token``), the
details of ``/stats`` (``Authorization: Bearer TOKEN``) and watching from another
host ask for; tokens are compared with :func:`hmac.compare_digest`.

A run-local view (``run --view``, ``view STORE``) has no token: its controls answer
a loopback peer (the user's own run, on the user's own machine) and nobody else.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import secrets
from collections.abc import Mapping
from typing import Final

__all__ = ["ENV", "LOCAL", "Operator", "is_loopback", "operator_token"]

#: The environment variable that sets the operator token instead of a fresh one.
ENV: Final = "BARNRAISE_OPERATOR_TOKEN"
#: What a token given in :data:`ENV` must look like: URL-safe (it goes in a page's URL
#: fragment), long enough not to be guessed, short enough to be a token.
_TOKEN: Final = re.compile(r"^[A-Za-z0-9_\-.~]{16,256}$")


def is_loopback(host: str | None) -> bool:
    """True for a loopback address (127.0.0.0/8, ::1, an IPv4-mapped one) or ``localhost``."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def operator_token(environ: Mapping[str, str] | None = None) -> str:
    """The operator token: :data:`ENV` when it is set, else a fresh random one.

    ValueError when :data:`ENV` is set to something that is not a usable token.
    """
    given = (os.environ if environ is None else environ).get(ENV)
    if given is None:
        return secrets.token_urlsafe(24)
    if not _TOKEN.match(given):
        raise ValueError(f"{ENV} must be 16 to 256 URL-safe characters (letters, digits, "
                         f"- _ . ~), got {len(given)} characters that are not")
    return given


class Operator:
    """The authority over a served world's controls and details.

    ``token`` None: a run-local view, whose loopback peers may do everything and
    other peers nothing beyond what anyone may.
    """

    __slots__ = ("_token", "token")

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self._token = None if token is None else token.encode("utf-8")

    def valid(self, token: object) -> bool:
        """True when ``token`` is this operator's (in constant time); never with no token."""
        if self._token is None or not isinstance(token, str):
            return False
        return hmac.compare_digest(token.encode("utf-8", "surrogatepass"), self._token)

    def may_control(self, peer: str | None, token: object) -> bool:
        """A control from ``peer`` carrying ``token``: the operator's token, or a loopback
        peer of a run-local view."""
        if self._token is None:
            return is_loopback(peer)
        return self.valid(token)

    def may_watch(self, peer: str | None, token: object = None) -> bool:
        """Watching: anyone on loopback; from another host, with the token."""
        return is_loopback(peer) or self.valid(token)

    def may_see_details(self, peer: str | None, authorization: str | None) -> bool:
        """``/stats`` in full: ``Authorization: Bearer TOKEN``, or a loopback peer of a
        run-local view."""
        if self._token is None:
            return is_loopback(peer)
        scheme, _, credentials = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and self.valid(credentials.strip())


#: The operator of a gateway that was given none: a run-local view's.
LOCAL: Final = Operator()
