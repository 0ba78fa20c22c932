# FedNova's normalisation on the paper's ESync with a server lr that makes the step as long as the fast devices' (tau_max/tau_eff = 10/5.5 = 1.82 at 10x), and half-way (1.4)
cd /work/main
for g in 1.8 1.4; do for dist in non-iid iid; do for seed in 1 2 3; do
  out=/tmp/pxf/pnormg$g-$dist-$seed; [ -f $out/summary.json ] && continue
  timeout 900 nice -n 10 /work/main/.venv/bin/python -m mxhet.sim -n 4 --slowdown 10,10,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 30 --eval-samples 1000 --metrics-out $out --no-progress --seed $seed --dist $dist --sync esync --aggregation normalized --global-lr $g > $out.log 2>&1
done; done; done
