import os
import sys

from ..config import omp_wait_policy
from ..mxnet_import import import_mxnet

os.environ["OMP_WAIT_POLICY"] = omp_wait_policy()   # before MXNet loads OpenMP, which reads it once
import_mxnet()   # first (lean): the simulator's modules import MXNet
from .cli import main  # noqa: E402

sys.exit(main())
