#!/bin/bash
# the baselines of the non-i.i.d. goal (Sync and Async), GroupNorm, 10x, lr 0.03, 120 virtual s
R=/work/runs/explore/run.sh
export CODE=/work/snap/ls1
$R gn-sync10x-lr0.03 4 10,10,1,1 sync 0.03 120 --dist non-iid --norm group
$R gn-async10x-lr0.03 4 10,10,1,1 async 0.03 120 --dist non-iid --norm group
