"""pytest plugin for benchmarks/slow_suite.py: appends one JSON line per finished test.

Loaded with ``-p slow_record``; writes to the file named by $SLOW_SUITE_LOG as each test ends,
so an interrupted run still records every test it finished.
"""

from __future__ import annotations

import json
import os
import time


def pytest_runtest_logreport(report):
    path = os.environ.get("SLOW_SUITE_LOG")
    if not path:
        return
    # One line per test: the call phase, or a setup/teardown phase that failed or skipped.
    if report.when != "call" and report.outcome == "passed":
        return
    line = {
        "test": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "seconds": round(report.duration, 2),
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if report.failed:
        # The exception's line ("AssertionError: ..."), else the report's last line.
        crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", "") or ""
        text = crash.strip() or str(report.longrepr or "").strip()
        line["message"] = (text.splitlines()[0] if crash.strip() else
                           text.splitlines()[-1] if text else "")[:300]
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
