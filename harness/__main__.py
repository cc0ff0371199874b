"""`python -m harness ...`: see harness/cli.py."""

import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
