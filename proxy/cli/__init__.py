"""The `mirrorgate` command: argument parsing, every subcommand, and the demo. The top layer; the
only importer of the fake model server (`proxy.mock_upstream`) besides the tests.
"""

from .main import main

__all__ = ["main"]
