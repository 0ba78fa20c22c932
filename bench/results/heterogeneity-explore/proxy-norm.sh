# small CNN screen at 10x (as proxy-needed.sh): FedNova's per-step normalisation ('--aggregation normalized') on the paper's ESync and on the recommended configuration
cd /work/main
for v in pnorm rnorm; do for dist in non-iid iid; do for seed in 1 2 3; do
  out=/tmp/pxf/$v-$dist-$seed; [ -f $out/summary.json ] && continue
  extra="--aggregation normalized"; [ $v = rnorm ] && extra="$extra --round-deadline 8 --round-length 8 --late-memory"
  timeout 900 nice -n 10 /work/main/.venv/bin/python -m mxhet.sim -n 4 --slowdown 10,10,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 30 --eval-samples 1000 --metrics-out $out --no-progress --seed $seed --sync esync --dist $dist $extra > $out.log 2>&1
done; done; done
