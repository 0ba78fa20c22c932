# the same screen's baselines on the current code: the paper's ESync, the recommended configuration (lm), Sync over all four
cd /work/main
for v in paper lm sync; do for dist in non-iid iid; do for seed in 1 2 3; do
  out=/tmp/pxf/$v-$dist-$seed; [ -f $out/summary.json ] && continue
  extra="--sync esync"; [ $v = lm ] && extra="$extra --round-deadline 8 --round-length 8 --late-memory"; [ $v = sync ] && extra="--sync sync"
  timeout 900 nice -n 10 /work/main/.venv/bin/python -m mxhet.sim -n 4 --slowdown 10,10,1,1 --contexts cpu --base-iter 0.05 --model smallcnn --batch-size 32 --lr 0.03 --time-budget 30 --eval-samples 1000 --metrics-out $out --no-progress --seed $seed --dist $dist $extra > $out.log 2>&1
done; done; done
