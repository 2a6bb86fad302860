import sys

from harness.regression.cli import main

sys.exit(main())
