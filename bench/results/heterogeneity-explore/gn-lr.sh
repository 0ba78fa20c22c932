#!/bin/bash
# the candidate on label-skewed data at lower learning rates (GroupNorm, 10x, 180 virtual s)
export CODE=/work/snap/ls1
R=/work/runs/explore/run.sh
$R gn-dl8-10x-lr0.015 4 10,10,1,1 esync 0.015 180 --dist non-iid --norm group --round-deadline 8 --round-length 8 &
$R gn-dl8-10x-lr0.01 4 10,10,1,1 esync 0.01 180 --dist non-iid --norm group --round-deadline 8 --round-length 8
wait
