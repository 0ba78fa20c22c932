"""The sliding-window sync-graph against a union-find rebuilt from scratch."""
import random

import pytest

from mxhet.control.window_graph import WindowGraph


def brute_labels(ranks, groups):
    parent = {r: r for r in ranks}

    def find(r):
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for members in groups:
        members = [r for r in members if r in parent]
        for r in members[1:]:
            parent[find(r)] = find(members[0])
    return {r: find(r) for r in ranks}


def same_partition(a, b):
    """Two labellings of the same ranks describe the same components."""
    pairs = {}
    for r in a:
        if pairs.setdefault(a[r], b[r]) != b[r]:
            return False
    return len(set(a.values())) == len(set(b.values()))


@pytest.mark.parametrize("seed", range(6))
def test_components_match_a_rebuilt_union_find_over_every_window(seed):
    rng = random.Random(seed)
    n = rng.choice([5, 9, 16, 30])
    p = rng.choice([2, 3, 4])
    window = rng.randint(1, 12)
    ranks = list(range(n))
    graph = WindowGraph(ranks)
    history = []
    for number in range(300):
        if rng.random() < 0.3:
            # a stubborn pair keeps meeting, as in a group freeze
            members = rng.sample(ranks[:p + 1], p)
        else:
            members = rng.sample(ranks, p)
        history.append(members)
        graph.add(number, members)
        graph.expire(number - window + 1)
        inside = history[-window:]
        expected = brute_labels(ranks, inside)
        got = {r: graph.component(r) for r in ranks}
        assert same_partition(got, expected), (number, inside)
        assert graph.components == len(set(expected.values()))
        probe = rng.sample(ranks, p)
        assert graph.joined_by(probe) == len({expected[r] for r in probe})


def test_an_empty_window_leaves_every_rank_alone():
    graph = WindowGraph(range(4))
    graph.add(0, [0, 1, 2, 3])
    assert graph.components == 1
    graph.expire(1)
    assert graph.components == 4
    assert len({graph.component(r) for r in range(4)}) == 4


def test_ranks_outside_the_graph_are_ignored_and_numbers_must_increase():
    graph = WindowGraph([0, 1, 2])
    graph.add(3, [0, 7, 1])
    assert graph.components == 2
    assert graph.component(0) == graph.component(1) != graph.component(2)
    with pytest.raises(ValueError, match="increase"):
        graph.add(3, [1, 2])


def test_the_newer_edge_survives_when_an_older_one_expires():
    # 0-1 at group 0, 1-2 at 1, then 0-2 at 2 closes a cycle: the forest drops
    # the oldest edge (0-1), so expiring group 0 keeps all three connected.
    graph = WindowGraph(range(3))
    graph.add(0, [0, 1])
    graph.add(1, [1, 2])
    graph.add(2, [0, 2])
    graph.expire(1)
    assert graph.components == 1
    graph.expire(2)
    assert graph.components == 2
    assert graph.component(0) == graph.component(2) != graph.component(1)
