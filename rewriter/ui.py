"""Terminal output for the CLI: quiet/JSON modes and a progress display on long steps.

Only the CLI prints; library code returns results. Progress goes to stderr (rich spinner when
stderr is a terminal, plain step lines otherwise, e.g. in CI logs) so stdout stays clean for
``--json``. A reader that stops reading stdout (``rewrite targets --json | head``) ends the output
quietly: the rest is dropped, with no BrokenPipeError traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

#: A finished step's plain progress line on stderr ("exporting model.tflite (int8): 0.8s").
_STEP_LINE = re.compile(r"^(?!error: |warning: ).+: \d+\.\ds$")


def is_progress_line(line: str) -> bool:
    """True for the plain progress lines :meth:`UI.step` writes when stderr is not a terminal
    (so a reader of stderr can set them apart from ``error:`` and ``warning:`` lines)."""
    return bool(_STEP_LINE.match(line))


class UI:
    def __init__(self, quiet: bool = False, json_mode: bool = False) -> None:
        self.quiet = quiet
        self.json_mode = json_mode
        self._console = None
        self._stdout_closed = False
        if not quiet and sys.stderr.isatty():
            try:
                from rich.console import Console

                self._console = Console(stderr=True)
            except ImportError:  # pragma: no cover - rich is a dependency
                self._console = None

    def out(self, text: str = "") -> None:
        """A line of human output on stdout (suppressed in JSON mode)."""
        if not self.json_mode:
            self._stdout(text)

    def json(self, obj: Any) -> None:
        self._stdout(json.dumps(obj, indent=2, default=_json_default))

    def _stdout(self, text: str) -> None:
        """Write and flush a line; once the reader has gone, drop this and all later output."""
        if self._stdout_closed:
            return
        try:
            print(text, flush=True)
        except BrokenPipeError:
            self._stdout_closed = True
            # Point fd 1 at /dev/null so the interpreter's final flush does not fail again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)

    def info(self, text: str) -> None:
        """A status line on stderr (suppressed with -q)."""
        if not self.quiet:
            print(text, file=sys.stderr)

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=sys.stderr)

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        """A long step: a spinner on a terminal; otherwise (CI logs, pipes) one plain line with
        its duration once it is done. A step that fails prints nothing: the ``error:`` line
        says why. Nothing with -q."""
        if self.quiet:
            yield
            return
        start = time.perf_counter()
        if self._console is not None:
            with self._console.status(description):
                yield
            self._console.print(f"[dim]{description}: {time.perf_counter() - start:.1f}s[/dim]")
            return
        yield
        print(f"{description}: {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)


    @contextlib.contextmanager
    def bar(self, description: str, total: int) -> Iterator[Any]:
        """A progress bar on a terminal; yields ``advance(steps, text)``; silent otherwise."""
        if self._console is None:
            yield lambda steps=1, text="": None
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        start = time.perf_counter()
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[text]}"), TimeRemainingColumn(),
                      console=self._console, transient=True) as shown:
            task = shown.add_task(description, total=total, text="")
            yield lambda steps=1, text="": shown.update(task, advance=steps, text=text)
        self._console.print(f"[dim]{description}: {time.perf_counter() - start:.1f}s[/dim]")


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if hasattr(obj, "to_json"):
        return obj.to_json()
    return str(obj)
