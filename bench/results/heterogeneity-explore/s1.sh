#!/bin/bash
# seed 1 of the candidate and of the paper's ESync (non-i.i.d. GroupNorm, 10x, 120 virtual s), beside gn-dl8m2-10x-lr0.03-seed1
export CODE=/work/snap/mifa
R=/work/runs/explore/run.sh
$R gn-dl8-10x-lr0.03-seed1 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --round-deadline 8 --round-length 8 --seed 1 &
$R gn-paper10x-lr0.03-seed1 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --seed 1 &
wait
