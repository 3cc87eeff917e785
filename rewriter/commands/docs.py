"""``rewrite docs``: regenerate ``docs/targets/*.md`` from the op tables (``--check``: verify).

The pages are generated, never edited, so they cannot drift from the tables; ``--check`` exits 1
and names the stale pages when a table changed without ``rewrite docs`` being run. One page,
``activations.md`` (:mod:`rewriter.report.activation_table`), is the activation x target table the
planner decides (it plans every activation: about 30 s).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rewriter.errors import UserError

HELP = ("regenerate docs/targets/*.md from op_tables/ and the rules (--check: fail if they are "
        "stale)")



def docs_dir() -> Path | None:
    """``docs/targets`` of the source checkout, or None when running from an installed wheel."""
    from rewriter.host.resources import source_checkout

    root = source_checkout()
    return root / "docs" / "targets" if root is not None else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a page differs from its table")
    parser.add_argument("--out", help="directory (default: docs/targets of the source checkout)")


def pages() -> dict[str, str]:
    """Every generated page: the op tables', the rules' and the activation table."""
    from rewriter.host.resources import source_checkout
    from rewriter.report.activation_table import PAGE, page
    from rewriter.report.rule_docs import render_rules
    from rewriter.targets import docs_files

    return {**docs_files(), "rules.md": render_rules(), PAGE: page(source_checkout())}


def stale_pages(out: Path) -> list[str]:
    """Pages under ``out`` that are missing or differ from what the tables generate."""
    stale = []
    for name, text in pages().items():
        page = out / name
        if not page.is_file() or page.read_text() != text:
            stale.append(name)
    return stale


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.host.fs import atomic_write_bytes

    if args.out is None and docs_dir() is None:
        raise UserError("no source checkout here (rewriter runs from an installed package): "
                        "give the directory with --out DIR")
    out = Path(args.out) if args.out is not None else docs_dir()
    if args.check:
        stale = stale_pages(out)
        for name in stale:
            ui.out(f"stale: {out / name} (run `rewrite docs`)")
        if not stale:
            ui.out(f"{out}: up to date")
        return 1 if stale else 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        atomic_write_bytes(out / name, text.encode())
        ui.info(f"wrote {out / name}")
    return 0
