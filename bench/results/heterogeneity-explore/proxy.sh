run() { n=$1; shift; PYTHONPATH=$PWD timeout 300 /work/main/.venv/bin/python -m mxhet.sim -n 4 --slowdown 10,10,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 30 --eval-samples 1000 --metrics-out /tmp/px/$n --no-progress "$@" >/dev/null 2>&1; }
mkdir -p /tmp/px
for seed in 1 2 3; do for dist in non-iid iid; do
 MXHET_MIFA=0 run paper-$dist-$seed --sync esync --dist $dist --seed $seed
 MXHET_MIFA=0 run dl8-$dist-$seed --sync esync --dist $dist --seed $seed --round-deadline 8 --round-length 8
 MXHET_MIFA=1 run mifa-$dist-$seed --sync esync --dist $dist --seed $seed --round-deadline 8 --round-length 8
 MXHET_MIFA=2 run m2-$dist-$seed --sync esync --dist $dist --seed $seed --round-deadline 8 --round-length 8
done; done
