# the small CNN screen of --late-memory at 10x (as proxy.sh, from /work/snap/lm = main at 4aabe7c)
mkdir -p /tmp/pxm && cd /work/snap/lm
for seed in 1 2 3; do for dist in non-iid iid; do PYTHONPATH=$PWD timeout 300 /work/main/.venv/bin/python -m mxhet.sim -n 4 --slowdown 10,10,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 30 --eval-samples 1000 --metrics-out /tmp/pxm/lm-$dist-$seed --no-progress --sync esync --dist $dist --seed $seed --round-deadline 8 --round-length 8 --late-memory >/dev/null 2>&1; done; done
