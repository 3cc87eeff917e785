"""What an exporter returns (:class:`ExportResult`) or raises (:class:`ExportError`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rewriter.errors import UserError


@dataclass
class ExportResult:
    """What an exporter wrote: the file, its ops, and what the user should know about it."""

    path: str
    format: str  # "tflite" | "onnx" | "saved_model"
    quantize: str  # "none" | "int8" | "float16"
    size: int  # bytes
    ops: list[str] = field(default_factory=list)  # operator names in execution order
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    route: str = ""  # how the converter was driven, for the report
    opset: int | None = None
    float_ops: list[str] = field(default_factory=list)  # int8 files: ops left in float
    io: list[dict[str, Any]] = field(default_factory=list)  # tflite: name/dtype/shape/scale/zp
    repairs: list[str] = field(default_factory=list)  # exact post-conversion repairs made

    def op_histogram(self) -> dict[str, int]:
        return dict(sorted(Counter(self.ops).items(), key=lambda kv: (-kv[1], kv[0])))

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "quantize": self.quantize,
                "size": self.size, "ops": self.op_histogram(), "warnings": list(self.warnings),
                "seconds": round(self.seconds, 3), "route": self.route, "opset": self.opset,
                "float_ops": list(self.float_ops), "io": list(self.io),
                "repairs": list(self.repairs)}


class ExportError(UserError):
    """An export failed; ``ops``/``nodes`` name the unsupported ops and the nodes holding them."""

    def __init__(self, message: str, *, format: str, ops: list[str] | None = None,
                 nodes: list[str] | None = None, detail: str = "", refused: bool = False) -> None:
        super().__init__(message)
        self.format = format
        self.ops = list(ops or [])
        self.nodes = list(nodes or [])
        self.detail = detail
        #: True when the converter was not run: the model was refused before it (a known crash).
        self.refused = refused

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "message": str(self), "ops": self.ops,
                "nodes": self.nodes, "detail": self.detail[-4000:], "refused": self.refused}
