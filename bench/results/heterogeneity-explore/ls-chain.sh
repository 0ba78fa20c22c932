#!/bin/bash
# --late-scale steps: non-i.i.d. GroupNorm (the design problem) and the i.i.d. BatchNorm check, 10x, lr 0.03
R=/work/runs/explore/run.sh
export CODE=/work/snap/ls1
$R gn-dl8ls-10x-lr0.03 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --round-deadline 8 --round-length 8 --late-scale steps &
$R dl8ls-10x-lr0.03 4 10,10,1,1 esync 0.03 60 --round-deadline 8 --round-length 8 --late-scale steps
wait
