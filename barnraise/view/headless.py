"""Headless Chromium for the live view's tests and benchmark: Debian's browser, never a download.

Playwright's Python API drives the browser Debian packages (``apt-get install
chromium``, at :data:`CHROMIUM`); nothing here fetches one at run time.
:func:`missing` says why a browser cannot be had (None when it can), in words a
test's skip reason can carry; :func:`launch` starts one.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "INSTALL_HINT", "launch", "missing"]

#: Where Debian's chromium package puts the browser (``BARNRAISE_CHROMIUM`` overrides).
CHROMIUM: Final = os.environ.get("BARNRAISE_CHROMIUM", "/usr/bin/chromium")
#: Flags for a quiet headless browser in a container: no sandbox (root), no GPU, no
#: first-run, update or sync traffic.
CHROMIUM_ARGS: Final = ("--headless=new", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync")
INSTALL_HINT: Final = ("install Debian's chromium (apt-get install -y chromium) and the "
                       "view extra (pip install '.[view]')")


def missing() -> str | None:
    """Why no headless browser can be launched here (None: one can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return f"Playwright is not installed; {INSTALL_HINT}"
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)) \
            and shutil.which(CHROMIUM) is None:
        return f"no chromium at {CHROMIUM}; {INSTALL_HINT}"
    return None


def launch(playwright: Playwright) -> Browser:
    """Start headless Chromium from :data:`CHROMIUM`; RuntimeError if there is none."""
    reason = missing()
    if reason is not None:
        raise RuntimeError(reason)
    return playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS),
                                      timeout=30_000)
