"""A process that runs ``rewrite`` commands in-process, one JSON request per stdin line.

The fuzz tests (``tests/test_fuzz.py``) send it hundreds of mutated model files: TensorFlow is
imported once, and when a file kills this process by a signal the test sees it die (and replays
that file through the real, supervised ``rewrite`` command). Answers: ``{"code", "stdout",
"stderr"}`` on the original stdout; everything native goes to /dev/null.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    from rewriter.cli import main as rewrite

    for line in sys.stdin:
        request = json.loads(line)
        out, err = io.StringIO(), io.StringIO()
        os.chdir(request["cwd"])
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = rewrite(request["args"])
            except BaseException as exc:  # noqa: BLE001 - main() must never raise: report it
                code = -1000
                err.write(f"main() raised {type(exc).__name__}: {exc}\n")
        answers.write(json.dumps({"code": code, "stdout": out.getvalue(),
                                  "stderr": err.getvalue()}) + "\n")


if __name__ == "__main__":
    main()
