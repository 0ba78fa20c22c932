#!/bin/bash
R=/work/runs/explore/run.sh
$R nd-dl8-10x-lr0.03 4 10,10,1,1 esync 0.03 60 --dist non-iid --round-deadline 8 --round-length 8
$R nd-sync10x-lr0.03 4 10,10,1,1 sync 0.03 60 --dist non-iid
$R nd-async10x-lr0.03 4 10,10,1,1 async 0.03 60 --dist non-iid
$R nd-paper10x-lr0.03 4 10,10,1,1 esync 0.03 60 --dist non-iid
