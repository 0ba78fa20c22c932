# the same at the paper's 117x profile (6 devices, 60 virtual s), R = 2
cd /work/snap/need
for seed in 1 2 3; do for dist in non-iid iid; do
 MXHET_NEED=2.0 PYTHONPATH=$PWD timeout 900 nice -n 5 /work/main/.venv/bin/python -m mxhet.sim -n 6 --slowdown 117,117,1,1,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 60 --eval-samples 1000 --metrics-out /tmp/pxn117/need2.0-$dist-$seed --no-progress --sync esync --dist $dist --seed $seed --round-deadline 8 --round-length 8 --late-memory >/dev/null 2>&1
done; done
