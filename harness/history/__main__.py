import sys

from harness.history.store import main

sys.exit(main())
