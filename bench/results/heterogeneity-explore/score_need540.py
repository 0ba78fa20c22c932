"""Score the needed-device 540 s run's snapshots (GroupNorm ResNet-18, so no BatchNorm to recompute) on 1,000
test images, and any at >= 0.78 on all 10,000: the run cannot be resumed (its checkpoint does not replay)."""
import glob, json, sys
from mxhet import data
from mxhet.evaluation import evaluation_network, load_snapshot
snaps = sorted(glob.glob("/work/runs/explore/gn-need2-540/snapshots/*.params"))
images, labels = data.load_fashion_mnist("test")
net = evaluation_network("resnet18_v1", 32, norm="group")
out = []
for p in snaps:
    load_snapshot(net, p)
    a = data.evaluate(net, images, labels, input_size=32, limit=1000)
    full = data.evaluate(net, images, labels, input_size=32) if a >= 0.78 else None
    out.append((p.split("/")[-1], a, full)); print(out[-1], flush=True)
json.dump(out, open("/work/runs/explore/gn-need2-540-scores.json", "w"))
