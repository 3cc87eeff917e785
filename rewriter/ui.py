"""Terminal output for the CLI: quiet/JSON modes and a progress display on long steps.

Only the CLI prints; library code returns results. Progress goes to stderr (rich spinner when
stderr is a terminal, plain step lines otherwise) so stdout stays clean for ``--json``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any


class UI:
    def __init__(self, quiet: bool = False, json_mode: bool = False) -> None:
        self.quiet = quiet
        self.json_mode = json_mode
        self._console = None
        if not quiet and sys.stderr.isatty():
            try:
                from rich.console import Console

                self._console = Console(stderr=True)
            except ImportError:  # pragma: no cover - rich is a dependency
                self._console = None

    def out(self, text: str = "") -> None:
        """A line of human output on stdout (suppressed in JSON mode)."""
        if not self.json_mode:
            print(text)

    def json(self, obj: Any) -> None:
        print(json.dumps(obj, indent=2, default=_json_default))

    def info(self, text: str) -> None:
        """A status line on stderr (suppressed with -q)."""
        if not self.quiet:
            print(text, file=sys.stderr)

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=sys.stderr)

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        """A spinner on a terminal while a long step runs, then its duration; silent otherwise."""
        if self._console is None:  # -q, or stderr is not a terminal (pipelines, CI)
            yield
            return
        start = time.perf_counter()
        with self._console.status(description):
            yield
        self._console.print(f"[dim]{description}: {time.perf_counter() - start:.1f}s[/dim]")


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
