import sys

from ..mxnet_import import import_mxnet

import_mxnet()   # first (lean): the simulator's modules import MXNet
from .cli import main  # noqa: E402

sys.exit(main())
