#!/usr/bin/env python3
"""Launch an mxhet job from a source checkout (same as the ``mxhet-launch`` console script).

    python tools/launch.py -n 4 -s 2 --sync esync --slowdown 1,1,1,20 -- python train.py

All logic lives in :mod:`mxhet.launcher`; see ``--help``.
"""
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from mxhet.launcher import main

    sys.exit(main())
