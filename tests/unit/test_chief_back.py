"""A chief started again (``mxhet-launch --elastic --max-restarts``) continues the job's record
(mxhet.train): the dead chief's index, its snapshot numbering, the job's clock, ``round_members``."""
import json

from mxhet.train import (SNAPSHOT_INDEX, continue_chief_record, job_round_members, next_snapshot_number,
                         read_snapshot_record, shift_event_times, write_snapshot_index)


def _snapshots(tmp_path, times):
    out = []
    for i, t in enumerate(times):
        path = tmp_path / ("%06d.params" % i)
        path.write_bytes(b"x")
        out.append((t, str(path)))
    return out


def test_the_index_records_the_jobs_start_and_the_restarts(tmp_path):
    snaps = _snapshots(tmp_path, [0.0, 2.0])
    write_snapshot_index(str(tmp_path), snaps, [[2.0, 1.5]], started_unix=1000.5,
                         restarts=[{"t_s": 9.0, "round": 4, "slot": 0, "curve_kept_until_s": 2.0}])
    index = json.loads((tmp_path / SNAPSHOT_INDEX).read_text())
    assert index["started_unix"] == 1000.5 and index["chief_restarts"][0]["round"] == 4
    record = read_snapshot_record(str(tmp_path))
    assert record == {"snapshots": snaps, "train_loss": [[2.0, 1.5]], "started_unix": 1000.5,
                      "chief_restarts": [{"t_s": 9.0, "round": 4, "slot": 0, "curve_kept_until_s": 2.0}]}


def test_an_index_without_the_new_fields_reads_as_no_start_and_no_restarts(tmp_path):
    snaps = _snapshots(tmp_path, [0.0])
    (tmp_path / SNAPSHOT_INDEX).write_text(json.dumps({"snapshots": [[0.0, "000000.params"]], "train_loss": []}))
    assert read_snapshot_record(str(tmp_path)) == {"snapshots": snaps, "train_loss": [], "started_unix": None,
                                                   "chief_restarts": []}
    assert read_snapshot_record(str(tmp_path / "none")) is None
    (tmp_path / SNAPSHOT_INDEX).write_text('{"snapshots": [], "train_loss": [], "chief_restarts": 3}')
    assert read_snapshot_record(str(tmp_path)) is None


def test_the_next_snapshot_comes_after_the_last_one_even_with_a_gap():
    assert next_snapshot_number([]) == 0
    assert next_snapshot_number([(0.0, "/d/000000.params"), (2.0, "/d/000003.params")]) == 4
    # the took-over survivor's final model is no numbered snapshot
    assert next_snapshot_number([(0.0, "/d/000001.params"), (9.0, "/d/final-rank1.params")]) == 2


def test_a_chief_back_keeps_the_dead_chiefs_points_and_counts_from_the_jobs_start(tmp_path):
    snaps = _snapshots(tmp_path, [0.0, 1.0, 2.0])
    record = {"snapshots": snaps, "train_loss": [[1.0, 2.1], [2.0, 1.9]], "started_unix": 1000.0,
              "chief_restarts": []}
    offset, kept, losses, job_started, restarts = continue_chief_record(record, 1012.25, first_round=7, slot=0)
    assert offset == 12.25 and job_started == 1000.0
    assert kept == snaps and losses == [[1.0, 2.1], [2.0, 1.9]]
    assert restarts == [{"t_s": 12.25, "round": 7, "slot": 0, "curve_kept_until_s": 2.0}]
    # a second comeback (a spare taking slot 0 again) keeps the first in the list
    record = dict(record, chief_restarts=restarts)
    _, _, _, _, restarts = continue_chief_record(record, 1030.0, first_round=15)
    assert [r["t_s"] for r in restarts] == [12.25, 30.0] and restarts[1]["round"] == 15


def test_a_chief_back_without_an_index_starts_the_record_on_its_own_clock():
    offset, kept, losses, job_started, restarts = continue_chief_record(None, 1012.0, first_round=3)
    assert (offset, kept, losses, job_started) == (0.0, [], [], 1012.0)
    assert restarts == [{"t_s": 0.0, "round": 3, "slot": 0, "curve_kept_until_s": None}]


def test_round_members_before_the_comeback_come_from_the_state_servers_record():
    members = {"0": [0, 1, 2], "1": [0, 1, 2], "2": [1, 2], "3": [1, 2], "4": [0, 1, 2], "5": [0, 1, 2]}
    assert job_round_members(members, [3, 3], first_round=4) == [3, 3, 2, 2, 3, 3]
    assert job_round_members(None, [3, 3], first_round=4) == [3, 3]


def test_event_times_move_onto_the_jobs_clock():
    elastic = {"events": [{"t_s": -8.5, "event": "leave", "slot": 0}, {"t_s": 0.5, "event": "join", "slot": 0},
                          {"t_s": None, "event": "late", "slot": 1}], "rounds_by_slot": {"0": [[0, 3]]}}
    moved = shift_event_times(elastic, 12.0)
    assert [e["t_s"] for e in moved["events"]] == [3.5, 12.5, None]
    assert moved["rounds_by_slot"] == {"0": [[0, 3]]}
    assert shift_event_times(None, 12.0) is None
