"""Run the mirrorgate benchmark suite: `.venv/bin/python bench/run.py [--quick] [--out DIR]`.

Starts a mock upstream, mirrorgate and LiteLLM on 127.0.0.1 (each pinned to CPUs), runs the
closed-loop scenarios, the memory and the profile stages, stops everything it started and prints
the results as Markdown (JSON and Markdown are also written to the output directory). Details:
bench/README.md and bench/suite.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # Run as a script, bench/ is on sys.path instead of the repository root: put the root first
    # so that `bench.*` and the gateway's own packages import the same way as with `-m bench.run`.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.suite import main

    sys.exit(main())
