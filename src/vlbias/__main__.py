"""python -m vlbias: the command line (vlbias.cli)."""

import sys

from vlbias.cli import main

sys.exit(main())
