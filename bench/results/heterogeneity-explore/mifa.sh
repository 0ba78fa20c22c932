#!/bin/bash
# prototype (env MXHET_MIFA=1, patches/mifa-prototype.diff): every round applies the mean over all devices of each one's latest delta
export CODE=/work/snap/mifa MXHET_MIFA=1
R=/work/runs/explore/run.sh
$R gn-dl8mifa-10x-lr0.03 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --round-deadline 8 --round-length 8 &
$R dl8mifa-10x-lr0.03 4 10,10,1,1 esync 0.03 60 --round-deadline 8 --round-length 8
wait
