"""The README's worked example, recorded: one `rewrite` run on the sample model.

    PYTHONPATH=. python benchmarks/readme_example.py [--out benchmarks/results/readme_example]

Runs ``rewrite models/convbn_elu.keras --target ethos-u55-128 --calibration
models/calibration.npy -o OUT`` in-process and writes OUT.md (the command's summary line and the
job's report.md) and OUT.json (report.json), stamped (``benchmarks/stamp.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ["models/convbn_elu.keras", "--target", "ethos-u55-128", "--calibration",
       "models/calibration.npy"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "readme_example"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks import stamp
    from rewriter.cli import main as rewrite

    with tempfile.TemporaryDirectory(prefix="readme_example_") as tmp:
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            code = rewrite([str(ROOT / a) if a.startswith("models/") else a for a in JOB]
                           + ["-o", str(Path(tmp) / "out")])
        report_md = (Path(tmp) / "out" / "report.md").read_text()
        report = json.loads((Path(tmp) / "out" / "report.json").read_text())
        report_md = report_md.replace(str(Path(tmp)) + "/", "").replace(str(ROOT) + "/", "")
    summary = stdout.getvalue().replace(str(Path(tmp)) + "/", "").strip().splitlines()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join([
        "# The README's example run", "",
        f"`rewrite {' '.join(JOB)} -o out`: exit {code}", "", "```", *summary, "```", "",
        "## out/report.md", "", report_md]) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"exit": code, "report": report}, indent=1)
                                        + "\n")
    stamp.stamp_files([out.with_suffix(".md"), out.with_suffix(".json")], "readme_example.py",
                      argv)
    print(f"exit {code}; {out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
