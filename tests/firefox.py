"""Headless Firefox for the live view's tests, driven over WebDriver BiDi with ``websockets``.

Debian's ``firefox-esr`` (``apt-get install -y firefox-esr``) is started headless
with a throwaway profile and ``--remote-debugging-port``; Firefox then serves
WebDriver BiDi (the W3C protocol, on by default since Firefox 129) at
``ws://127.0.0.1:PORT/session``, and this module speaks it with the ``websockets``
client the gateway already depends on: no geckodriver, no Marionette client, no
browser download. It does only what the tests need: open a page, evaluate
JavaScript, wait for a condition, take a screenshot, and collect the page's
JavaScript errors (``log.entryAdded`` of type ``javascript``: uncaught exceptions
and syntax errors, including a module that fails to load).

Every wait has a timeout; :meth:`Firefox.close` ends the browser (``browser.close``,
then SIGTERM, then SIGKILL) and removes the profile.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any, Final

#: The browser (``BARNRAISE_FIREFOX`` overrides): Debian's firefox-esr.
FIREFOX: Final = os.environ.get("BARNRAISE_FIREFOX", "firefox-esr")
INSTALL_HINT: Final = ("install Debian's firefox-esr (apt-get install -y firefox-esr) and the "
                       "test extra (pip install '.[test]')")
#: Wall seconds for the browser to start and for one command's answer.
START_TIMEOUT: Final = 30.0
COMMAND_TIMEOUT: Final = 30.0
#: A quiet browser: nothing fetched, no updates, telemetry, first-run pages or prompts.
PREFS: Final = {
    "app.update.auto": False, "app.update.enabled": False,
    "browser.shell.checkDefaultBrowser": False, "browser.startup.homepage_override.mstone":
    "ignore", "browser.aboutwelcome.enabled": False, "datareporting.policy.dataSubmissionEnabled":
    False, "toolkit.telemetry.enabled": False, "toolkit.telemetry.unified": False,
    "browser.safebrowsing.malware.enabled": False, "browser.safebrowsing.phishing.enabled":
    False, "network.captive-portal-service.enabled": False, "network.connectivity-service.enabled":
    False, "extensions.update.enabled": False, "browser.search.update": False,
    "remote.active-protocols": 1,  # WebDriver BiDi only
}


def _binary() -> str | None:
    found = shutil.which(FIREFOX)
    return found if found is not None and os.access(found, os.X_OK) else None


def missing() -> str | None:
    """Why headless Firefox cannot be driven here (None: it can)."""
    try:
        import websockets.sync.client  # noqa: F401
    except ImportError:
        return f"the websockets package is not installed; {INSTALL_HINT}"
    if _binary() is None:
        return f"no Firefox at {FIREFOX!r}; {INSTALL_HINT}"
    return None


class BiDiError(RuntimeError):
    """A command Firefox answered with an error, or a wait that ran out."""


class Firefox:
    """One headless Firefox and its BiDi session, with one page (a browsing context)."""

    def __init__(self, *, width: int = 1280, height: int = 900) -> None:
        reason = missing()
        if reason is not None:
            raise RuntimeError(reason)
        from websockets.sync.client import connect

        self.errors: list[dict[str, Any]] = []  # the page's JavaScript errors, as logged
        self._next = 0
        self._stack = contextlib.ExitStack()
        self._reader: threading.Thread | None = None
        self._profile = tempfile.mkdtemp(prefix="barnraise-firefox-")
        with open(os.path.join(self._profile, "user.js"), "w", encoding="utf-8") as f:
            for key, value in PREFS.items():
                f.write(f"user_pref({json.dumps(key)}, {json.dumps(value)});\n")
        binary = _binary()
        assert binary is not None
        self.process = subprocess.Popen(
            [binary, "--headless", "--no-remote", "--profile", self._profile,
             "--remote-debugging-port=0", f"--width={width}", f"--height={height}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True)
        try:
            url = self._listening()
            # entered as a context manager (websockets >= 17.1 warns otherwise); left in close
            self._socket = self._stack.enter_context(
                connect(f"{url}/session", open_timeout=START_TIMEOUT, max_size=None))
            self.version = self.command("session.new", {"capabilities": {}})[
                "capabilities"]["browserVersion"]
            self.command("session.subscribe", {"events": ["log.entryAdded"]})
            tree = self.command("browsingContext.getTree", {})
            self.context = tree["contexts"][0]["context"]
        except BaseException:
            self.close()
            raise

    def _listening(self) -> str:
        """The BiDi address Firefox prints on stderr once it listens."""
        lines: queue.Queue[bytes] = queue.Queue()
        stderr = self.process.stderr
        assert stderr is not None

        def read() -> None:  # the rest of stderr is read and dropped, so it never fills
            for line in stderr:
                lines.put(line)
            lines.put(b"")

        self._reader = threading.Thread(target=read, name="firefox-stderr", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT
        seen: list[bytes] = []
        while True:
            left = deadline - time.monotonic()
            try:
                line = lines.get(timeout=max(0.0, left))
            except queue.Empty:
                raise BiDiError(f"Firefox did not offer WebDriver BiDi within "
                                f"{START_TIMEOUT:g} s; it said: {b''.join(seen)[-500:]!r}"
                                ) from None
            if not line:
                raise BiDiError(f"Firefox exited ({self.process.poll()}) before listening; "
                                f"it said: {b''.join(seen)[-500:]!r}")
            seen.append(line)
            text = line.decode(errors="replace")
            if "WebDriver BiDi listening on " in text:
                return text.split("WebDriver BiDi listening on ", 1)[1].strip().rstrip("/")

    def command(self, method: str, params: dict[str, Any],
                timeout: float = COMMAND_TIMEOUT) -> dict[str, Any]:
        """Send one command and wait for its answer (events that come first are kept)."""
        self._next += 1
        ident = self._next
        self._socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BiDiError(f"{method}: no answer within {timeout:g} s")
            try:
                message = json.loads(self._socket.recv(timeout=left))
            except TimeoutError:
                raise BiDiError(f"{method}: no answer within {timeout:g} s") from None
            if message.get("type") == "event":
                self._event(message)
            elif message.get("id") == ident:
                if message.get("type") == "error":
                    raise BiDiError(f"{method}: {message.get('error')}: "
                                    f"{message.get('message')}")
                result: dict[str, Any] = message["result"]
                return result

    def _event(self, message: dict[str, Any]) -> None:
        if message.get("method") == "log.entryAdded":
            entry = message.get("params", {})
            if entry.get("type") == "javascript" or entry.get("level") == "error":
                self.errors.append(entry)

    def goto(self, url: str, timeout: float = COMMAND_TIMEOUT) -> None:
        self.command("browsingContext.navigate",
                     {"context": self.context, "url": url, "wait": "complete"}, timeout)

    def evaluate(self, expression: str, timeout: float = COMMAND_TIMEOUT) -> Any:
        """The value of a JavaScript expression in the page (awaited if a promise), passed
        through JSON."""
        answer = self.command("script.evaluate", {
            "expression": f"(async () => JSON.stringify(await ({expression})))()",
            "target": {"context": self.context}, "awaitPromise": True,
            "resultOwnership": "none"}, timeout)
        if answer.get("type") == "exception":
            details = answer.get("exceptionDetails", {})
            raise BiDiError(f"{expression[:80]!r} threw: {details.get('text')}")
        value = answer["result"]
        if value.get("type") != "string":
            return None  # JSON.stringify(undefined)
        return json.loads(value["value"])

    def wait_for(self, condition: str, timeout: float = 20.0, every: float = 0.05) -> None:
        """Wait until the JavaScript expression ``condition`` is truthy."""
        deadline = time.monotonic() + timeout
        while not self.evaluate(f"Boolean({condition})"):
            if time.monotonic() > deadline:
                raise BiDiError(f"waited {timeout:g} s for {condition!r}")
            time.sleep(every)

    def screenshot(self, path: str) -> None:
        data = self.command("browsingContext.captureScreenshot", {"context": self.context})
        with open(path, "wb") as f:
            f.write(base64.b64decode(data["data"]))

    def close(self, timeout: float = 10.0) -> None:
        """End the session and the browser (asked, then told), and remove the profile."""
        if getattr(self, "_socket", None) is not None:
            with contextlib.suppress(Exception):
                self.command("browser.close", {}, timeout=timeout)
        with contextlib.suppress(Exception):
            self._stack.close()  # the WebSocket
        process = self.process
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)  # its own group: its children too
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
        # a content process that outlived the browser (none should) goes with its group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if self._reader is not None:
            self._reader.join(timeout)  # stderr's end: the reader is done with it
        if process.stderr is not None and (self._reader is None or not self._reader.is_alive()):
            process.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Firefox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
