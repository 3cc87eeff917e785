"""The ``rewrite`` command line.

``rewrite MODEL --target T [-o OUT]`` runs the whole job (the ``run`` command); the other
subcommands live one per module in :mod:`rewriter.commands`, each with ``HELP``,
``add_arguments(parser)`` and ``run(args, ui) -> int``. Exit codes: 0 success, 1 result not
acceptable, 2 bad usage or input (one line ``error: ...`` on stderr, never a traceback), 3
internal error (one line naming the stage and a kept log); see :mod:`rewriter.supervise`, which
also runs the console script's work in a child process so a native crash cannot end a run
silently.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from rewriter import __version__, supervise

#: Subcommand name -> module in rewriter.commands. ``run`` is also the default command.
COMMANDS = {
    "run": "run",
    "check": "check",
    "verify": "verify",
    "inspect": "inspect",
    "restore": "restore",
    "unfreeze": "unfreeze",
    "targets": "targets",
    "docs": "docs",
    "merge": "merge",
    "batch": "batch",
}


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")
    import warnings

    warnings.filterwarnings("ignore")


def _import_tensorflow_quietly() -> None:
    """Import TensorFlow once with fd 2 silenced: its native code logs CUDA/absl noise on import
    that no TF_CPP_MIN_LOG_LEVEL setting suppresses."""
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow

        tensorflow.get_logger().setLevel("ERROR")
    except ImportError:
        pass
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


#: Commands that never touch TensorFlow (fast, and no import noise to hide).
_NO_TF_COMMANDS = {"targets", "docs", "batch"}


def _available_commands() -> dict[str, object]:
    mods = {}
    for name, mod in COMMANDS.items():
        try:
            mods[name] = importlib.import_module(f"rewriter.commands.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name != f"rewriter.commands.{mod}":
                raise
    return mods


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rewrite", description=(
        "Rewrite a TensorFlow model so it runs on an edge target. "
        "`rewrite MODEL --target T -o OUT` runs the whole job; subcommands below."))
    parser.add_argument("--version", action="version", version=f"rewriter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, mod in _available_commands().items():
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``rewrite ARGV``; without ``argv`` (the console script) the work runs in a supervised
    child process."""
    if argv is None:
        if supervise.should_supervise():
            return supervise.supervise(sys.argv[1:])
        if supervise.ENV_DIR in os.environ:
            supervise.attach()
    _quiet_tensorflow()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # `rewrite MODEL --target T` is `rewrite run MODEL --target T`.
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        argv = ["run", *argv]
    if not argv:
        parser.print_help()
        return 2
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors (already printed)
        return int(exc.code or 0)
    if getattr(args, "_module", None) is None:
        parser.print_help()
        return 2
    try:
        if args.command not in _NO_TF_COMMANDS:
            converts = getattr(args._module, "converts", None)
            if converts is not None and converts(args):
                from rewriter import isolate

                isolate.prestart()  # the converter worker imports TensorFlow while we do
            supervise.set_stage("importing TensorFlow")
            _import_tensorflow_quietly()
        from rewriter.ui import UI

        ui = UI(quiet=args.quiet, json_mode=getattr(args, "json", False))
        supervise.track_stages(ui)
        supervise.set_stage(f"running `rewrite {args.command}`")
        return int(args._module.run(args, ui))
    except BaseException as exc:  # every way a command can end becomes one line and a code
        code, message = supervise.exit_code_for(exc)
        if message:
            print(f"error: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
