cd /work/snap/lm
run() { n=$1; shift; PYTHONPATH=$PWD timeout 600 nice -n 5 /work/main/.venv/bin/python -m mxhet.sim -n 6 --slowdown 117,117,1,1,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 60 --eval-samples 1000 --metrics-out /tmp/px117/$n --no-progress "$@" >/dev/null 2>&1; }
for seed in 1 2 3; do for dist in non-iid iid; do
 run paper-$dist-$seed --sync esync --dist $dist --seed $seed
 run dl8-$dist-$seed --sync esync --dist $dist --seed $seed --round-deadline 8 --round-length 8
 run lm-$dist-$seed --sync esync --dist $dist --seed $seed --round-deadline 8 --round-length 8 --late-memory
done; done
