#!/bin/bash
# esync --late-memory (4aabe7c, /work/snap/lm) on the design runs: non-i.i.d. GroupNorm 120 s, seeds 0 and 1; i.i.d. BatchNorm 60 s
while pgrep -f "s1.sh" > /dev/null; do sleep 20; done
export CODE=/work/snap/lm
R=/work/runs/explore/run.sh
$R gn-lm-10x-lr0.03 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --round-deadline 8 --round-length 8 --late-memory &
$R gn-lm-10x-lr0.03-seed1 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --round-deadline 8 --round-length 8 --late-memory --seed 1 &
wait
$R lm-10x-lr0.03 4 10,10,1,1 esync 0.03 60 --round-deadline 8 --round-length 8 --late-memory
