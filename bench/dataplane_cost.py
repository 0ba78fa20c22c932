"""The data plane's fixed cost: one ESync exchange, one key per parameter vs flat buckets.

Runs as the worker of a one-worker, one-server PS-LITE job, so nothing waits
for another device: each timed push/pull is the exchange's own cost (encode,
PS-LITE messages, the server's merge and Python updater call per key, the
pull). Both layouts live in the same kvstore (per-parameter keys from 1000 up,
bucket keys from 0), with the same updater (ESync's average), interleaved::

    mxhet-launch -n 1 -s 1 --sync esync -- python -m bench.dataplane_cost \\
        --model resnet18_v1 --repeat 30 --out runs/dataplane-cost

(one model per job: the bucket keys of a layout are 0..B-1).

Also profiles (cProfile) the worker's Python side of each layout on the
largest model, to show what the worker itself spends.
"""
import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time

from bench.provenance import provenance


class Counters:
    bytes_pushed = bytes_pulled = 0
    sync_s = 0.0


def model_arrays(name, input_size):
    import mxnet as mx
    from mxhet import models
    net = models.get_model(name, classes=10, input_size=input_size)
    net.initialize(mx.init.Xavier())
    net(mx.nd.zeros((2, 1, input_size, input_size)))
    return [p.data().copy() for _, p in sorted(net.collect_params().items())]


def main(argv=None):
    import mxnet as mx
    from kvstore_ext.updaters import ESyncAverage
    from mxhet.dataplane.channel import DEFAULT_BUCKET_BYTES, KVChannel
    from mxhet.models import min_input_size
    p = argparse.ArgumentParser(prog="python -m bench.dataplane_cost", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18_v1")
    p.add_argument("--input-size", type=int, default=32)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--bucket-bytes", type=int, default=0, help="bytes per bucket (default: the channel's default)")
    p.add_argument("--out", default="runs/dataplane-cost")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    kv = mx.kv.create("dist_sync")
    results, profiles, offset = [], {}, 1000
    for name in [args.model]:
        arrays = model_arrays(name, max(args.input_size, min_input_size(name)))
        n = len(arrays)
        per_key = KVChannel("dist_sync", Counters(), bucket_bytes=0)
        bucketed = KVChannel("dist_sync", Counters(), bucket_bytes=args.bucket_bytes or DEFAULT_BUCKET_BYTES)
        per_key.kv = bucketed.kv = kv
        keys_a = list(range(offset, offset + n))
        offset += n + 10
        bufs_a = per_key.share_model(keys_a, arrays, ESyncAverage(1), 1)
        keys_b = list(range(n))   # the bucketed layout's own keys are 0..B-1; these only name the parameters
        bufs_b = bucketed.share_model(keys_b, arrays, ESyncAverage(1), 1)
        times = {"per_key": [], "bucketed": []}
        for rep in range(args.repeat + 2):
            for label, ch, keys, bufs in (("per_key", per_key, keys_a, bufs_a), ("bucketed", bucketed, keys_b, bufs_b)):
                # fresh deltas each time: MXNet reuses a pushed CPU array as the key's receive buffer
                deltas = [mx.nd.ones(a.shape) * 1e-3 for a in arrays]
                mx.nd.waitall()
                t0 = time.perf_counter()
                ch.push_pull(keys, deltas, bufs)
                if rep >= 2:
                    times[label].append(time.perf_counter() - t0)
        same = all(float((a - b).abs().max().asscalar()) == 0.0 for a, b in zip(bufs_a, bufs_b))
        size = sum(int(a.size) * 4 for a in arrays)
        row = {"model": name, "keys": n, "buckets": len(bucketed.layout.buckets), "model_bytes": size,
               "bucket_bytes": bucketed.bucket_bytes,
               "same_model": same}
        for label, xs in times.items():
            row[label] = {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs), "n": len(xs)}
        results.append(row)
        print("%-12s %3d keys -> %d buckets, %5.1f MB: push+pull median %.1f ms per key vs %.1f ms bucketed "
              "(min %.1f vs %.1f); same model: %s" % (
                  name, n, row["buckets"], size / 1e6, 1000 * row["per_key"]["median_s"],
                  1000 * row["bucketed"]["median_s"], 1000 * row["per_key"]["min_s"],
                  1000 * row["bucketed"]["min_s"], same), flush=True)
        for label, ch, keys, bufs in (("per_key", per_key, keys_a, bufs_a), ("bucketed", bucketed, keys_b, bufs_b)):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(5):
                ch.push_pull(keys, [mx.nd.ones(a.shape) * 1e-3 for a in arrays], bufs)
            prof.disable()
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(8)
            profiles["%s %s" % (name, label)] = text.getvalue()
    with open(os.path.join(args.out, "dataplane-cost-%s-%d.json" % (args.model, results[0]["bucket_bytes"])),
              "w") as f:
        json.dump({"experiment": "dataplane-cost", "command": ["python", "-m", "bench.dataplane_cost"] + list(
            sys.argv[1:] if argv is None else argv), "runs": results,
                   "provenance": provenance(["python", "-m", "bench.dataplane_cost"] + list(sys.argv[1:] if argv is None else argv)), "profiles": profiles}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
