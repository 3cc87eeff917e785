"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
no websocket or browser-automation package, only the Debian ``chromium``.

``--dump-dom`` and ``--screenshot`` take the page at its load event; a single-page app such as
Model Explorer draws its graph later (after the server converts the model), and keeps an event
stream open, which stalls ``--virtual-time-budget``. This waits for a condition in the page.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-unsafe-swiftshader", "--remote-debugging-pipe"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page; messages are NUL-terminated JSON on fds 3 and 4."""

    def __init__(self, exe: str, profile: Path, width: int = 1600, height: int = 1000) -> None:
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        def fds_3_and_4() -> None:  # the child reads commands on fd 3, writes replies on fd 4
            r, w = os.dup(to_child_r), os.dup(from_child_w)  # above 4: dup2 cannot clobber
            os.dup2(r, 3)
            os.dup2(w, 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(3, 4), preexec_fn=fds_3_and_4)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width,
                  height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, session: bool = False, timeout: float = 60,
             **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            if time.monotonic() > deadline:
                raise TimeoutError(method)
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buf += chunk

    def goto(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)

    def eval(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", session=True, expression=expression,
                        returnByValue=True, awaitPromise=True)
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60, every: float = 0.5) -> Any:
        """Poll ``expression`` until it is truthy; its last value (falsy) on timeout."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(every)
        return value

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            os.write(self._w, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._w)
            os.close(self._r)
