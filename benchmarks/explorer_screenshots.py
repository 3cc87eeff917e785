"""README's Model Explorer screenshots: the Edge TPU cut on the plain converter's file (from
``rewrite check -o``) beside the job's file (from ``rewrite -o``), both coloured by placement.

    python benchmarks/explorer_screenshots.py CHECK_OUT JOB_OUT [--to docs]

Starts ``rewrite explore --no-open`` on each directory, opens the URL in headless Chromium
(tests/cdp.py: the DevTools protocol on a pipe), expands every layer and saves the graph area
as ``docs/explorer_converter_cut.png`` and ``docs/explorer_job.png``.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cdp import Browser, chromium  # noqa: E402

EXPAND = ("[...document.querySelectorAll('*')].find(e => e.children.length === 0 && "
          "e.textContent.trim() === 'unfold_more_double').closest('div,button').click()")
LOADED = ("(document.body && document.body.innerText.includes('NODE DATA PROVIDERS') && "
          "document.body.innerText.includes('placement')) ? 1 : 0")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shoot(out: Path, png: Path, width: int, height: int,
          clip: tuple[int, int, int, int], scale: float = 1) -> None:
    """Screenshot ``clip`` (x, y, width, height) of the page showing ``out`` in a window of
    ``width`` x ``height``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "rewriter", "explore", str(out),
                               "--no-open", "--port", str(_port())], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = ""
        while not url.startswith("http"):
            url = server.stdout.readline().strip()
            if server.poll() is not None:
                raise SystemExit(f"rewrite explore {out} stopped")
        with tempfile.TemporaryDirectory() as profile:
            browser = Browser(chromium(), Path(profile), width, height)
            try:
                browser.goto(url)
                if not browser.wait_for(LOADED, timeout=90):
                    raise SystemExit(f"{out}: the node data did not load")
                browser.eval(EXPAND)
                browser.call("Input.dispatchMouseEvent", session=True, type="mouseMoved",
                             x=width - 5, y=height - 5)  # away from the button's tooltip
                time.sleep(3)
                x, y, w, h = clip
                data = browser.call("Page.captureScreenshot", session=True, format="png",
                                    clip={"x": x, "y": y, "width": w, "height": h,
                                          "scale": scale})["data"]

                png.write_bytes(base64.b64decode(data))
            finally:
                browser.close()
    finally:
        server.terminate()
        server.wait(timeout=20)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("check_out", type=Path)
    p.add_argument("job_out", type=Path)
    p.add_argument("--to", type=Path, default=ROOT / "docs")
    a = p.parse_args()
    shoot(a.check_out, a.to / "explorer_converter_cut.png", 1700, 800, (0, 200, 1300, 450))
    shoot(a.job_out, a.to / "explorer_job.png", 1300, 1300, (330, 140, 280, 1130), 2)
    print(f"wrote {a.to / 'explorer_converter_cut.png'} and {a.to / 'explorer_job.png'}")


if __name__ == "__main__":
    main()
