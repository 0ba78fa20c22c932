#!/bin/bash
R=/work/runs/explore/run.sh
$R gn-dl8-10x-lr0.03 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group --round-deadline 8 --round-length 8
$R gn-paper10x-lr0.03 4 10,10,1,1 esync 0.03 120 --dist non-iid --norm group
