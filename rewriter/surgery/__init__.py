"""Checkpoint surgery: list and diff checkpoints, restore weights into a modified model,
and turn a frozen graph back into a trainable SavedModel.

The seeds' authors lost days to these jobs (``NotFoundError: Key ... not found in checkpoint``
after a graph gained or lost variables, renamed scopes, a frozen ``.pb`` that cannot be
retrained). Each one is a function here and a ``rewrite`` subcommand.
"""

from __future__ import annotations

from rewriter.surgery.checkpoints import (
    diff_checkpoint,
    is_checkpoint,
    list_checkpoint_variables,
    open_variables,
)
from rewriter.surgery.variables import Diff, Mismatch, NameMap, Pair, VarInfo

__all__ = ["Diff", "Mismatch", "NameMap", "Pair", "VarInfo", "diff_checkpoint",
           "is_checkpoint", "list_checkpoint_variables", "open_variables"]
