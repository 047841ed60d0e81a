"""`python -m sandfleet.cli`: the same as the `sandfleet` console script."""

import sys

from sandfleet.cli.main import main

sys.exit(main())
