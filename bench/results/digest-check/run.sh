#!/bin/bash
# usage: run.sh TREE OUT -- short paper-sim-shaped jobs (ResNet-18, 6 devices 4,4,1,1,1,1, 2 virtual s) on the code in TREE;
# each job's summary.json (with its final model digest) goes to OUT/JOB
tree=$1; outdir=$2
common="--contexts cpu --base-iter 0.115 --model resnet18_v1 --batch-size 64 --lr 0.1 --dist iid --time-budget 2 --seed 0 --eval-interval 100 --input-size 32 --eval-samples 100"
while read name args; do
  out=$outdir/$name; rm -rf $out; mkdir -p $outdir
  (cd /tmp && OMP_NUM_THREADS=1 MXNET_ENGINE_TYPE=NaiveEngine PYTHONPATH=$tree timeout 900 ${PYTHON:-python} -m mxhet.sim $args $common --metrics-out $out > $out.log 2>&1)
  echo "$name rc=$?"
done <<'JOBS'
sync -n 6 --sync sync --slowdown 4,4,1,1,1,1
async -n 6 --sync async --slowdown 4,4,1,1,1,1
dcasgd -n 6 --sync dcasgd --slowdown 4,4,1,1,1,1
ssp -n 6 --sync ssp --slowdown 4,4,1,1,1,1
esync -n 6 --sync esync --slowdown 4,4,1,1,1,1
localsgd -n 6 --sync localsgd --slowdown 4,4,1,1,1,1
adsp -n 6 --sync adsp --slowdown 4,4,1,1,1,1 --adsp-period 0.5 --adsp-epoch 60
local -n 1 --sync local --slowdown 1
sync-fast -n 4 --sync sync --slowdown 1,1,1,1
JOBS
