"""``--wait-needed`` in the simulator (virtual time): on label-sorted data the late device's loss on the global model
rises above R x the fast devices', and the rounds wait for it, its delta entering on time with a full share; on
i.i.d. data at 10x nobody is needed and the run is the deadline's, bit for bit."""
import pytest

from tests.unit.test_sim_round_deadline import _sim

pytestmark = pytest.mark.timeout(300)

# ResNet-18's profile (8x) gets a longer budget: its slow device needs its test batch and two iterations before
# its loss on a pulled model is known, and one more to be waited for
NEEDED = {"smallcnn": (), "resnet18_v1": ("--time-budget", "4")}


def _digests(out):
    return {w["slot"]: w["final_model_sha256"] for w in out["workers"]}


@pytest.mark.parametrize("model", ["smallcnn", "resnet18_v1"])
def test_on_label_sorted_data_the_rounds_wait_for_the_late_device_the_global_model_serves_badly(tmp_path, model):
    out = _sim(tmp_path, "needed", model, "--dist", "non-iid", "--round-deadline", "4", "--wait-needed", "2",
               *NEEDED[model])
    assert len(set(_digests(out).values())) == 1
    waited = [r for r, slots in out["sim"]["needed_rounds"] if 2 in slots]
    assert waited, out["sim"]["needed_rounds"]
    shares = {}
    for slot, r, share in out["sim"]["deadline_pushes"]:
        shares.setdefault(r, {})[slot] = share
    # a round that waited for slot 2 holds its delta on time: the same share as each fast device's
    for r in waited:
        assert shares[r][2] == pytest.approx(shares[r][0]) == pytest.approx(1 / 3)
    # before it was needed, slot 2 was late: its deltas entered with a staleness discount
    before = [share for r, s in sorted(shares.items()) if r < waited[0] and 2 in s for share in [s[2]]]
    assert before and all(share < 1 / 3 for share in before)


def test_on_iid_data_at_10x_nobody_is_needed_and_the_run_is_the_deadlines(tmp_path):
    ten_x = ("--slowdown", "1,1,10", "--time-budget", "1.2", "--round-deadline", "4")
    needed = _sim(tmp_path, "needed", "smallcnn", *ten_x, "--wait-needed", "2")
    assert needed["sim"]["needed_rounds"] == []
    plain = _sim(tmp_path, "plain", "smallcnn", *ten_x)
    assert "needed_rounds" not in plain["sim"]   # the summary names needed rounds only under the rule
    assert _digests(needed) == _digests(plain)
    assert needed["sim"]["deadline_pushes"] == plain["sim"]["deadline_pushes"]
    assert any(share < 1 / 3 for slot, _, share in plain["sim"]["deadline_pushes"] if slot == 2)   # slot 2 is late
