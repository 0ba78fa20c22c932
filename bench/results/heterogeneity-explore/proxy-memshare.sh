cd /work/snap/lmx
run() { n=$1; shift; PYTHONPATH=$PWD timeout 600 nice -n 5 /work/main/.venv/bin/python -m mxhet.sim -n 4 --slowdown 10,10,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 30 --eval-samples 1000 --metrics-out /tmp/pxv/$n --no-progress "$@" >/dev/null 2>&1; }
for seed in 1 2 3; do for dist in non-iid iid; do
 MXHET_MEMSHARE=ontime run ontime-$dist-$seed --sync esync --dist $dist --seed $seed --round-deadline 8 --round-length 8 --late-memory
done; done
