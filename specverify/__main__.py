import sys

from specverify.cli import main

sys.exit(main())
