# the small CNN screen of the "needed device" prototype at 10x (patches/needed-prototype.diff on 1b4a5e1, in /work/snap/need): MXHET_NEED=R waits for a device whose loss on the global model is above R x the lowest device's
cd /work/snap/need
for need in 1.5 2.0; do for dist in non-iid iid; do for seed in 1 2 3; do
  out=/tmp/pxn/need$need-$dist-$seed; [ -f $out/summary.json ] && continue
  MXHET_NEED=$need PYTHONPATH=$PWD timeout 600 nice -n 5 /work/main/.venv/bin/python -m mxhet.sim -n 4 --slowdown 10,10,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 30 --eval-samples 1000 --metrics-out $out --no-progress --seed $seed --sync esync --dist $dist --round-deadline 8 --round-length 8 --late-memory >/dev/null 2>&1
done; done; done
