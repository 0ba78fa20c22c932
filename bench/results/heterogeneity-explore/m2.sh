#!/bin/bash
# prototype (env MXHET_MIFA=2, patches/mifa-prototype.diff): the round's members keep their shares; a device absent
# from the round adds its latest delta at 1/N
export CODE=/work/snap/mifa MXHET_MIFA=2
R=/work/runs/explore/run.sh
$R gn-dl8m2-10x-lr0.03 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --round-deadline 8 --round-length 8 &
while [ ! -f /work/runs/explore/dl8mifa-10x-lr0.03/summary.json ]; do sleep 10; done
$R dl8m2-10x-lr0.03 4 10,10,1,1 esync 0.03 60 --round-deadline 8 --round-length 8
wait
