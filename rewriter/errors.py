"""Errors that the CLI turns into exit codes.

Library code raises :class:`UserError` for bad usage or bad input (the CLI prints one line,
``error: ...``, and exits 2). :class:`InternalError` is a fault of rewriter or of the libraries it
drives (a converter that died by a signal): one line naming the stage and the kept log, exit 3.
Any other exception is a bug: the CLI keeps its traceback in a log and exits 3 the same way.
"""

from __future__ import annotations

#: Lines TensorFlow puts before the words that say what went wrong.
_BOILERPLATE = ("Graph execution error", "Detected at node", "Node: ", "Original stack trace",
                "[[", "{{function_node")


class UserError(Exception):
    """Bad usage or bad input: the message says what is wrong and what to do. Exit code 2."""


class RuleError(Exception):
    """A rewrite rule or pass produced an invalid graph; names the pass and the rule."""


class InternalError(Exception):
    """Not the user's fault: a stage crashed. Exit code 3; ``log`` keeps the details."""

    def __init__(self, message: str, log: str | None = None) -> None:
        super().__init__(message)
        self.log = log

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}; log kept at {self.log}" if self.log else text


def first_line(exc: BaseException | str, limit: int = 300) -> str:
    """The line of an error message that says what went wrong (TensorFlow's "Graph execution
    error:" preamble skipped), at most ``limit`` characters; the type name when empty."""
    text = exc if isinstance(exc, str) else str(exc)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(_BOILERPLATE)]
    if not (useful or lines):
        return "" if isinstance(exc, str) else type(exc).__name__
    return (useful or lines)[0][:limit]
