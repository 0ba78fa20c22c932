#!/bin/bash
# usage: run.sh NAME N SLOWDOWNS MODE LR BUDGET [extra sim flags...]
name=$1; n=$2; slow=$3; mode=$4; lr=$5; budget=$6; shift 6
out=/work/runs/explore/$name
[ -f $out/summary.json ] && exit 0
cd ${CODE:-/work/main} && PYTHONPATH=$PWD nice -n 5 /work/main/.venv/bin/python -m mxhet.sim -n $n --sync $mode --slowdown $slow --contexts cpu --base-iter 0.115 --eval-min-iterations 20 --eval-growth 0.1 --model resnet18_v1 --batch-size 64 --lr $lr --dist iid --time-budget $budget --target-accuracy 0.8 --seed 0 --eval-interval 0.0575 --input-size 32 --eval-samples 1000 --metrics-out $out "$@" > /work/runs/explore/$name.log 2>&1
