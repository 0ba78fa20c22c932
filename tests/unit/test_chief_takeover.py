"""The chief's snapshot index (mxhet.train): what a survivor that takes over the chief's end-of-job
duties under ``mxhet-launch --elastic`` scores."""
import json

from mxhet.train import SNAPSHOT_INDEX, read_snapshot_index, write_snapshot_index


def test_the_index_lists_the_chiefs_snapshots_and_loss_points_for_a_survivor(tmp_path):
    paths = [tmp_path / ("%06d.params" % i) for i in range(3)]
    for p in paths[:2]:
        p.write_bytes(b"x")
    write_snapshot_index(str(tmp_path), [(0.0, str(paths[0])), (2.5, str(paths[1])), (5.0, str(paths[2]))],
                         [[2.5, 1.9]])
    assert json.loads((tmp_path / SNAPSHOT_INDEX).read_text())["snapshots"][1] == [2.5, "000001.params"]
    snapshots, losses = read_snapshot_index(str(tmp_path))
    # a file the index names but that is not there (removed by hand, another disk) is left out
    assert snapshots == [(0.0, str(paths[0])), (2.5, str(paths[1]))] and losses == [[2.5, 1.9]]


def test_no_index_or_a_broken_one_gives_no_snapshots(tmp_path):
    assert read_snapshot_index(str(tmp_path)) == ([], [])
    (tmp_path / SNAPSHOT_INDEX).write_text('{"snapshots": [[0.0]]')
    assert read_snapshot_index(str(tmp_path)) == ([], [])
    (tmp_path / SNAPSHOT_INDEX).write_text('{"snapshots": 3, "train_loss": []}')
    assert read_snapshot_index(str(tmp_path)) == ([], [])
