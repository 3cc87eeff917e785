"""What the user told us about a model beyond its path (its own module, so that the front ends
can import it without importing the package that dispatches to them)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LoadOptions:
    """What the user told us about the model beyond its path."""

    signature: str | None = None
    inputs: list[str] | None = None
    outputs: list[str] | None = None
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    unsafe: bool = False
    #: ``--set NAME=VALUE``: scalar placeholders baked in as constants (value text as given)
    settings: dict[str, str] = field(default_factory=dict)
    #: refuse non-numeric inputs (every command that feeds or converts data; not ``inspect``)
    numeric_inputs: bool = True
