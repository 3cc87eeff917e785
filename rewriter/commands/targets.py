"""``rewrite targets``: the targets this tool knows, with the source of each op table."""

from __future__ import annotations

import argparse
from typing import Any

HELP = "list the targets (op tables) with their sources"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list")


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.targets import list_targets

    targets = list_targets()
    rows = [{"name": t.name, "title": t.title, "table": f"op_tables/{t.table_name}.toml",
             "artifact": t.artifact, "default_quantize": t.default_quantize,
             "partitioning": t.partitioning, "vela_config": t.vela_config,
             "opset": t.opset, "version": t.version, "sources": t.sources} for t in targets]
    if ui.json_mode:
        ui.json(rows)
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        extra = f", opset {r['opset']}" if r["opset"] else ""
        ui.out(f"{r['name'].ljust(width)}  {r['title']} (.{r['artifact']}, "
               f"{r['default_quantize']}{extra}; {r['version']})")
        ui.out(f"{''.ljust(width)}  source: {r['sources'][0]}")
    return 0
