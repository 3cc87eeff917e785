"""The ``rewrite`` command line.

``rewrite MODEL --target T [-o OUT]`` runs the whole job (the ``run`` command); the other
subcommands live one per module in :mod:`rewriter.commands`, each with ``HELP``,
``add_arguments(parser)``, ``run(args, ui) -> int`` and optionally ``validate(args)``, which
checks names and paths before TensorFlow is imported (so a typo is reported at once). Exit codes:
0 success, 1 result not acceptable, 2 bad usage or input (one line ``error: ...`` on stderr, never
a traceback), 3 internal error (one line naming the stage and a kept log); see
:mod:`rewriter.host.supervise`, which also runs the console script's work in a child process so a
native crash cannot end a run silently.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from rewriter import __version__
from rewriter.host import supervise

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
    "explore": "explore",
}


#: Values that start with '-' but are numbers or number lists (``--input-range -1,1``,
#: ``--atol -1e-3``), so argparse takes them as values, not as unknown options.
_NEGATIVE_VALUE = re.compile(
    r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?(,-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)*$")
#: Options of ``rewrite`` itself, accepted before the command (or the model) too.
_GLOBAL_FLAGS = ("-q", "--quiet")


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line and exit 2, and which reads negative
    numbers and number lists as values."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_VALUE

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
_NO_TF_COMMANDS = {"targets", "docs", "batch", "explore"}


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
    parser = _Parser(prog="rewrite", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description=(
                         "Rewrite a TensorFlow model so it runs on an edge target. "
                         "`rewrite MODEL --target T -o OUT` runs the whole job (the `run` "
                         "command; its options are listed below the commands)."))
    parser.add_argument("--version", action="version", version=f"rewriter {__version__}")
    parser.add_argument(*_GLOBAL_FLAGS, dest="quiet", action="store_true", default=False,
                        help="no progress output (also accepted after the command)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, mod in _available_commands().items():
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP,
                           epilog=getattr(mod, "EPILOG", None),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        # SUPPRESS: an unset -q after the command keeps a -q given before it.
        p.add_argument(*_GLOBAL_FLAGS, dest="quiet", action="store_true",
                       default=argparse.SUPPRESS, help="no progress output")
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
        if name == "run":
            parser.epilog = _main_job_help(p)
    return parser


def _main_job_help(run_parser: argparse.ArgumentParser) -> str:
    """The main job's usage and options, shown under ``rewrite --help`` too."""
    text = run_parser.format_help()
    body = text[text.index("\n\n") + 2:]  # after the usage
    body = body[body.index("\n\n") + 2:] if run_parser.description else body
    return ("the main job:\n  rewrite [run] MODEL --target T [-o OUT] [options]\n\n"
            + body.replace("positional arguments:\n", "", 1))


def with_default_command(argv: list[str]) -> list[str]:
    """``rewrite [-q] MODEL ...`` is ``rewrite [-q] run MODEL ...``."""
    i = 0
    while i < len(argv) and argv[i] in _GLOBAL_FLAGS:
        i += 1
    if i < len(argv) and not argv[i].startswith("-") and argv[i] not in COMMANDS:
        return [*argv[:i], "run", *argv[i:]]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """``rewrite ARGV``; without ``argv`` (the console script) the work runs in a supervised
    child process."""
    if argv is None:
        if supervise.should_supervise():
            return supervise.supervise(sys.argv[1:])
        if supervise.ENV_DIR in os.environ:
            supervise.attach()
    try:  # an interrupt while parsing (the command modules import) ends like any other
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BaseException as exc:  # every way a command can end becomes one line and a code
        code, message = supervise.exit_code_for(exc)
        if message:
            print(f"error: {message}", file=sys.stderr)
        return code


def _main(argv: list[str]) -> int:
    _quiet_tensorflow()
    parser = build_parser()
    argv = with_default_command(argv)
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
    validate = getattr(args._module, "validate", None)
    if validate is not None:  # names and paths, before the seconds TensorFlow takes to import
        supervise.set_stage("checking the arguments")
        validate(args)
    if args.command not in _NO_TF_COMMANDS:
        converts = getattr(args._module, "converts", None)
        if converts is not None and converts(args):
            from rewriter.host import isolate

            isolate.prestart()  # the converter worker imports TensorFlow while we do
        supervise.set_stage("importing TensorFlow")
        _import_tensorflow_quietly()
    from rewriter.ui import UI

    ui = UI(quiet=args.quiet, json_mode=getattr(args, "json", False))
    supervise.track_stages(ui)
    supervise.set_stage(f"running `rewrite {args.command}`")
    return int(args._module.run(args, ui))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
