"""A small driver for Debian's headless chromium over the DevTools protocol (CDP).

Chromium listens for DevTools on a free loopback port; the test talks to one
page over a WebSocket (``websocket-client``): navigate, evaluate JavaScript,
take a screenshot. Every request of the page to a non-loopback address goes
to a closed local port (``--proxy-server``), and background networking is
off, so the browser reaches nothing outside this machine.
"""
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request

import pytest


def find_chromium():
    """Debian's chromium, or skip (fail under CI, where ``make test`` installs it)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        why = "Debian's chromium is not installed (make test installs it: apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return path


class HeadlessChromium:
    """One headless chromium and its first page.

    Args:
        profile_dir: a fresh user-data directory.
        child_pids: a ``ChildPids`` the browser's pid is recorded in (ended at teardown).
        timeout: seconds for start-up and for each DevTools call.
    """

    def __init__(self, profile_dir, child_pids, timeout=60.0, window=(1400, 1100)):
        import websocket

        self.timeout = timeout
        self.stderr = []
        argv = [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions",
                "--proxy-server=http://127.0.0.1:9", "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0", "--user-data-dir=%s" % profile_dir,
                "--window-size=%d,%d" % window, "--hide-scrollbars", "about:blank"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        child_pids.add(self.proc.pid)
        listening = threading.Event()
        endpoint = []

        def drain():
            for line in self.proc.stderr:
                self.stderr.append(line)
                found = re.search(r"DevTools listening on (ws://127\.0\.0\.1:(\d+)/\S+)", line)
                if found and not endpoint:
                    endpoint.append(int(found.group(2)))
                    listening.set()
        threading.Thread(target=drain, daemon=True).start()
        if not listening.wait(timeout):
            self.close()
            pytest.fail("chromium did not open DevTools within %.0f s:\n%s" % (timeout, "".join(self.stderr[-20:])))
        with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % endpoint[0], timeout=timeout) as response:
            pages = [t for t in json.load(response) if t.get("type") == "page"]
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout,
                                              suppress_origin=True)
        self._id = 0

    def call(self, method, **params):
        """One DevTools command; returns its result (events in between are skipped)."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError("%s failed: %s" % (method, message["error"]))
                return message.get("result", {})

    def evaluate(self, expression):
        """The JSON value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError("page script failed: %s" % result["exceptionDetails"])
        return result["result"].get("value")

    def navigate(self, url):
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        self.wait_until("document.readyState === 'complete'", "the page to load")

    def wait_until(self, expression, what, timeout=None):
        """Poll ``expression`` in the page until it is truthy; returns its value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        pytest.fail("timed out waiting for %s (%s)" % (what, expression))

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(str(path), "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)   # chromium and its helpers: its own session, by pid
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
