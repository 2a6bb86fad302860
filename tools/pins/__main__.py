import sys

from tools.pins import main

sys.exit(main())
