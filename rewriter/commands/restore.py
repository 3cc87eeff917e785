"""``rewrite restore SOURCE --into TARGET -o OUT``: a checkpoint's weights into a modified model.

Variables are matched by name after ``--map`` rules, shapes and dtypes are checked, matching ones
are copied bit for bit and the rest keep the target's own values. OUT is a directory for every
format (written inside, staged and swapped in: :mod:`rewriter.host.fs`).

The verdict is the exit code: 0 when written and every source variable went somewhere; 1 when a
variable is mismatched (same name, another shape or dtype: the target keeps its own value) or
unused (in the source only, not training state such as optimizer slots:
:func:`rewriter.surgery.variables.is_training_state`) and ``--allow-mismatch`` does not name it (OUT is still written, the
variables are named on stderr, ``-q`` included), when nothing was written because no variable
matched (unless ``--allow-empty``), or, with ``--strict``, when some target variable was not
restored; 2 for bad input (missing paths, unreadable checkpoints, an unparsable ``.meta``, OUT
over an input). New variables (in the target only) are what a modified model adds: they keep
their own values and do not change the verdict (``--strict`` makes them fatal).
"""

from __future__ import annotations

import argparse
import fnmatch
from typing import Any

HELP = "restore a checkpoint's weights into a modified model (match by name, copy exactly)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="TF1/TF2 checkpoint prefix, .keras/.h5/.weights.h5, or "
                        "SavedModel holding the trained weights")
    parser.add_argument("--into", dest="target", required=True, metavar="TARGET",
                        help="the modified model: TF1 .meta graph, .keras/.h5 model or SavedModel")
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output directory: OUT/model.ckpt.* (for a .meta target), "
                        "OUT/model.keras or .h5, or OUT as the SavedModel")
    parser.add_argument("--map", dest="maps", action="append", default=[], metavar="OLD=NEW",
                        help="rename source variables: prefix OLD/=NEW/ or regex re:PATTERN=REPL "
                        "(repeatable; the first rule that matches a name applies)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 (writing nothing) unless every target variable is restored")
    parser.add_argument("--allow-mismatch", dest="allowed", action="append", default=[],
                        metavar="NAME|all",
                        help="accept a mismatched or unused variable (its target or source name, "
                        "a glob pattern, or `all`; repeatable): without it either makes the "
                        "exit code 1")
    parser.add_argument("--allow-empty", action="store_true",
                        help="write OUT (exit 0) even when no variable restores")
    parser.add_argument("--unsafe", action="store_true",
                        help="allow models holding code (Keras Lambda layers; initialisers that "
                        "touch files or run Python)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


#: What restore writes into OUT (an existing OUT holding only these may be replaced).
OUTPUTS = ("model.ckpt*", "checkpoint", "model.keras", "model.h5", "saved_model.pb*",
           "variables", "assets", "assets.extra", "fingerprint.pb", "keras_metadata.pb")


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.host.fs import staged_output
    from rewriter.surgery.restore import restore

    with staged_output(args.output, [args.source, args.target], OUTPUTS, "restore") as stage:
        with ui.step(f"restoring {args.source} into {args.target}"):
            result = restore(args.source, args.target, str(stage.path), args.maps,
                             args.strict, unsafe=args.unsafe, allow_empty=args.allow_empty)
        if not result.written:
            stage.discard()
        result.output = stage.relocate(result.output)
        result.files = stage.relocate(result.files)
    if not result.written and not (args.strict and not result.complete):
        if args.json:
            ui.json({"ok": False, **result.to_json()})
        else:
            _print(result, ui)
        ui.warn("no variable of the source matches one of the target, nothing written: check "
                "the names with `rewrite inspect SOURCE --against TARGET` and add --map rules "
                "(or pass --allow-empty)")
        return 1
    strict_failed = args.strict and not result.complete
    # --allow-empty: the user expects nothing to match, so the unused source is no surprise
    expected_empty = args.allow_empty and not result.diff.restored
    refused = [] if expected_empty else unaccepted(result.diff, args.allowed)
    if args.json:
        ui.json({"ok": not strict_failed and not refused, "unaccepted": refused,
                 **result.to_json()})
    else:
        _print(result, ui)
    if strict_failed:
        ui.warn(_strict_reason(result))
        return 1
    if refused:
        ui.warn(f"{_counts(result.diff)}; not acceptable: " + "; ".join(refused)
                + " (pass --allow-mismatch NAME, or --allow-mismatch all, if that is expected)")
        return 1
    return 0


def unaccepted(diff: Any, allowed: list[str]) -> list[str]:
    """Each mismatched or unused variable that no ``--allow-mismatch`` names, described."""
    def ok(*names: str) -> bool:
        return "all" in allowed or any(fnmatch.fnmatchcase(n, pattern)
                                       for n in names for pattern in allowed)

    found = [f"mismatched {m.reason()}" for m in diff.mismatched
             if not ok(m.target.name, m.source.name)]
    found += [f"unused {v.name} {v.describe()} (in the source only)" for v in diff.unused
              if not ok(v.name)]
    return found


def _counts(diff: Any) -> str:
    counts = (f"{len(diff.restored)} restored, {len(diff.new)} new, {len(diff.unused)} unused, "
              f"{len(diff.mismatched)} mismatched")
    if diff.training_state:
        counts += (f" ({len(diff.training_state)} training-state variable(s) of the source not "
                   "restored: optimizer slots and counters)")
    return counts


def _print(result: Any, ui: Any) -> None:
    diff = result.diff
    rows = [("restored", p.target + ("" if p.source == p.target else f" <- {p.source}"),
             _shape(p.dtype, p.shape)) for p in diff.restored]
    rows += [("new", v.name, f"{v.describe()} (keeps the target's own value)")
             for v in diff.new]
    rows += [("unused", v.name, v.describe()) for v in diff.unused]
    rows += [("mismatched", m.target.name, f"target {m.target.describe()}, source "
              f"{m.source.name} {m.source.describe()} (keeps the target's own value)")
             for m in diff.mismatched]
    width = max((len(r[1]) for r in rows), default=0)
    for kind, name, detail in rows:
        ui.out(f"  {kind:<10} {name:<{width}}  {detail}")
    ui.out(_counts(diff))
    if result.written:
        ui.out(f"wrote {result.output} ({result.target_kind}); {result.verified} restored values "
               "read back identical")
    else:
        ui.out("nothing written")


def _strict_reason(result: Any) -> str:
    diff = result.diff
    parts = [f"{v.name} (not in the source)" for v in diff.new]
    parts += [f"{m.reason()}" for m in diff.mismatched]
    return (f"--strict: {len(parts)} target variable(s) not restored, nothing written: "
            + "; ".join(parts))


def _shape(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype}{list(shape)}"
