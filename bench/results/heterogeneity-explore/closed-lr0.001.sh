#!/bin/bash
# Screens (not bench statistics): ESync's recommended configuration at the closed division's lr 0.001, 117x, ResNet-18, seed 0, 40 virtual s.
cd /work/main
name=$1; shift   # bash closed-lr0.001.sh rec --round-deadline 8 --round-length 8 --late-memory; the same with rec-g4 and --global-lr 4 too
OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m mxhet.sim -n 6 --sync esync --slowdown 117,117,1,1,1,1 --contexts cpu --base-iter 0.115 --eval-min-iterations 20 --eval-growth 0.1 --model resnet18_v1 --batch-size 64 --lr 0.001 --dist iid --time-budget 40 --target-accuracy 0.8 --seed 0 --eval-interval 6.7275 --input-size 32 --eval-samples 1000 --metrics-out /work/runs/x001/$name "$@" > /work/runs/x001/$name.log 2>&1
OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m bench.confirm /work/runs/x001/$name >> /work/runs/x001/$name.log 2>&1
