#!/bin/bash
# the MXHET_MIFA=2 prototype on a second seed (non-i.i.d. GroupNorm, 10x, 120 virtual s)
export CODE=/work/snap/mifa MXHET_MIFA=2
/work/runs/explore/run.sh gn-dl8m2-10x-lr0.03-seed1 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --round-deadline 8 --round-length 8 --seed 1
