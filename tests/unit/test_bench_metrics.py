"""The bench's derived numbers and its table, from a hand-made summary."""
from bench.cli import format_table, speedup_line
from bench.metrics import run_record


def _summary(mode, ttt, workers):
    return {"model": "smallcnn", "mode": mode, "dist": "iid", "time_to_target_s": ttt, "final_accuracy": 0.81,
            "train_time_s": 10.0, "curve": [[0.0, 0.1], [10.0, 0.81]], "workers": workers}


def _worker(slot, samples, iters, compute, wait, pushed=100, pulled=100):
    return {"slot": slot, "samples": samples, "local_iters": iters, "compute_ratio": compute / (compute + wait),
            "bytes_pushed": pushed, "bytes_pulled": pulled, "slowdown": 1.0, "rounds": len(iters)}


def test_run_record_numbers():
    s = _summary("esync", 4.0, [_worker(1, 640, [1, 1], 9.0, 1.0), _worker(0, 1280, [4, 6], 6.0, 4.0)])
    r = run_record(s)
    assert r["samples_per_s"] == 192.0
    assert r["bytes_per_s"] == 40.0
    assert r["local_iters_mean"] == [5.0, 1.0]      # slot order
    assert r["compute_ratio"] == [0.6, 0.9]


def test_table_and_speedup():
    es = run_record(_summary("esync", 4.0, [_worker(0, 64, [3], 1.0, 1.0)]))
    sy = run_record(_summary("sync", None, [_worker(0, 64, [1], 1.0, 1.0)]))
    table = format_table([es, sy], 0.8)
    assert "not reached" in table and "4.0 s" in table
    assert "speedup > 2.5x" in speedup_line([es, sy], 0.8)
    sy["time_to_target_s"] = 8.0
    assert "2.0x faster" in speedup_line([es, sy], 0.8)


def test_dynamic_table_groups_rounds_by_time():
    from bench.cli import format_dynamic
    rounds = [{"end_s": 0.5, "local_iters": [4, 1], "slowest_slot": 1},
              {"end_s": 1.5, "local_iters": [2, 1], "slowest_slot": 1},
              {"end_s": 2.5, "local_iters": [1, 3], "slowest_slot": 0}]
    lines = format_dynamic(rounds, 2.0).splitlines()
    assert len(lines) == 3
    assert "3.0 1.0" in lines[1] and lines[1].rstrip().endswith("1")
    assert "1.0 3.0" in lines[2] and lines[2].rstrip().endswith("0")


def test_demo_names_the_best_alternative_and_says_when_esync_loses():
    from bench.cli import best_alternative_line
    es = dict(run_record(_summary("esync", 4.0, [_worker(0, 64, [3], 1.0, 1.0)])), variant="esync")
    alone = dict(run_record(_summary("local", 2.0, [_worker(0, 64, [1], 1.0, 1.0)])), variant="local")
    fast = dict(run_record(_summary("sync", 6.0, [_worker(0, 64, [1], 1.0, 1.0)])), variant="sync-fast")
    line = best_alternative_line([es, alone, fast], 0.8)
    assert "standalone (fastest device) reached 0.80 in 2.0 s" in line and "2.00x slower" in line
    assert "sync-fast" in format_table([es, alone, fast], 0.8)
    assert "ESync is 1.50x faster" in best_alternative_line([es, fast], 0.8)


def test_an_adsp_run_record_carries_its_search_short():
    comparison = {"time": 80.7, "checkpoint": 4, "search": 0, "rates": [1, 2], "rewards": [0.01, 0.02],
                  "losses": [[2.3, 2.1], [2.1, 1.9]], "samples": [20, 30], "level": 1.9, "decision": "climb",
                  "rate_after": 2}
    s = dict(_summary("adsp", None, [_worker(0, 64, [3], 1.0, 1.0)]),
             adsp_search={"period": 20.2, "epoch": 360.0, "window_periods": 2, "origin": 0.0,
                          "comparisons": [comparison], "windows": [], "periods": [],
                          "counts": {"searches": 1, "comparisons": 1, "climbs": 1, "windows": 2, "periods": 4,
                                     "final_rate": 2}})
    r = run_record(s)["adsp_search"]
    assert r["counts"]["comparisons"] == 1 and r["period"] == 20.2
    assert r["comparisons"] == [{"time": 80.7, "rates": [1, 2], "rewards": [0.01, 0.02], "decision": "climb"}]
    assert "adsp_search" not in run_record(_summary("esync", 4.0, [_worker(0, 64, [3], 1.0, 1.0)]))
