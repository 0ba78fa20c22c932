"""``python -m mxhet.launcher``: the same as ``mxhet-launch``."""
import sys

from . import main

sys.exit(main())
