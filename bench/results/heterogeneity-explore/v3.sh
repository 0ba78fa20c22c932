#!/bin/bash
# hack (env): late deltas at weight 1 (no staleness discount), shares normalised over the on-time members only
export CODE=/work/snap/v MXHET_LATE_NORM=ontime MXHET_LATE_A=one
R=/work/runs/explore/run.sh
$R gn-dl8v3-10x-lr0.03 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --round-deadline 8 --round-length 8 &
sleep 240
$R dl8v3-10x-lr0.03 4 10,10,1,1 esync 0.03 60 --round-deadline 8 --round-length 8
wait
