# the small CNN screen of a SCAFFOLD prototype (patches/scaffold-prototype.diff on 6213fec, in /work/snap/scaf; MXHET_SCAFFOLD: 1 = option II for every device, A = the late one-step devices do not correct, B = their control variate an EMA at 0.75)
cd /work/snap/scaf
run() { name=$1; shift; for seed in 1 2 3; do MXHET_SCAFFOLD=$SC PYTHONPATH=$PWD timeout 900 nice -n 5 /work/main/.venv/bin/python -m mxhet.sim -n 4 --slowdown 10,10,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 30 --eval-samples 1000 --metrics-out /tmp/pxs/$name-$seed --no-progress --seed $seed "$@" >/dev/null 2>/tmp/pxs/$name-$seed.err; done; }
SC=1 run sclm-non-iid --sync esync --dist non-iid --round-deadline 8 --round-length 8 --late-memory
SC=1 run sc-non-iid --sync esync --dist non-iid --round-deadline 8 --round-length 8
SC=1 run sclm-iid --sync esync --dist iid --round-deadline 8 --round-length 8 --late-memory
SC=1A run scAlm-non-iid --sync esync --dist non-iid --round-deadline 8 --round-length 8 --late-memory
SC=1AB run scABlm-non-iid --sync esync --dist non-iid --round-deadline 8 --round-length 8 --late-memory
