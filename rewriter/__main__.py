"""``python -m rewriter`` is the ``rewrite`` command."""

import sys

from rewriter.cli import main

sys.exit(main())
