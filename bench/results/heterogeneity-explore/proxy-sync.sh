cd /work/main
for seed in 1 2 3; do PYTHONPATH=$PWD timeout 600 nice -n 5 /work/main/.venv/bin/python -m mxhet.sim -n 4 --slowdown 10,10,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 30 --eval-samples 1000 --metrics-out /tmp/pxs/sync-non-iid-$seed --no-progress --sync sync --dist non-iid --seed $seed >/dev/null 2>/tmp/pxs/sync-$seed.err; done
