"""Errors that the CLI turns into exit codes.

Library code raises :class:`UserError` for bad usage or bad input (the CLI prints one line,
``error: ...``, and exits 2). Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad usage or bad input: the message says what is wrong and what to do. Exit code 2."""


class RuleError(Exception):
    """A rewrite rule or pass produced an invalid graph; names the pass and the rule."""
