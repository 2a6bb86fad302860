import sys

from harness.gate.cli import main

sys.exit(main())
