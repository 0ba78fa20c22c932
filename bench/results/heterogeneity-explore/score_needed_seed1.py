"""Score the needed variant's seed-1 snapshots (GroupNorm ResNet-18) on 1,000 test images; >= 0.78 also on 10,000."""
import glob, json, sys
from mxhet import data
from mxhet.evaluation import evaluation_network, load_snapshot
D = "/work/runs/heterogeneity-n/runs/resnet18_v1_gn-10x-needed-non-iid-lr0.03-seed1/snapshots"
start = int(sys.argv[1]) if len(sys.argv) > 1 else 0
snaps = sorted(glob.glob(D + "/*.params"))[start:]
images, labels = data.load_fashion_mnist("test")
net = evaluation_network("resnet18_v1", 32, norm="group")
out = []
for p in snaps:
    load_snapshot(net, p)
    a = data.evaluate(net, images, labels, input_size=32, limit=1000)
    full = data.evaluate(net, images, labels, input_size=32) if a >= 0.78 else None
    out.append((p.split("/")[-1], a, full)); print(out[-1], flush=True)
json.dump(out, open("seed1-scores-%d.json" % start, "w"))
