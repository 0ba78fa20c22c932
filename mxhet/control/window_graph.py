"""Connectivity of the sync-graph of the last T groups, kept incrementally.

Partial Reduce's group filter (:mod:`mxhet.control.preduce`) asks, before
every group it forms, whether the groups of a sliding window connect every
worker, and which component each queued worker is in. Rebuilding a union-find
over the window costs O(N) per group. Here the graph is kept as a *maximum
spanning forest by age*: every edge carries the number of the group that made
it, and of two paths between the same workers the forest keeps the newer
edges. The forest's edges that are still inside the window then span exactly
the window's components, so dropping a group only cuts its own edges that are
still in the forest, and adding a group links its members, replacing the
oldest edge on the path between two members already joined. The forest is a
link-cut tree (Sleator and Tarjan): link, cut and the oldest edge on a path
each cost O(log N) amortized. Component labels are kept explicitly beside it
(see :class:`WindowGraph`), so asking for a worker's component is a lookup.

Edges are nodes of the link-cut tree too (a group of P members adds the P-1
edges of a star), so that the oldest edge on a path is the path's minimum.
"""

import collections
import itertools

_NEVER = float("inf")


class _LinkCutForest:
    """A link-cut tree over integer nodes; each node has a key, and a path
    query returns the node with the smallest key."""

    def __init__(self):
        self.left, self.right, self.up, self.flip, self.key, self.low = [], [], [], [], [], []

    def add(self, key):
        """A new node with ``key``, alone in its tree; returns its number."""
        self.left.append(-1)
        self.right.append(-1)
        self.up.append(-1)
        self.flip.append(False)
        self.key.append(key)
        self.low.append(len(self.key) - 1)
        return len(self.key) - 1

    def reuse(self, node, key):
        """Node ``node``, which must be alone, starts over with ``key``."""
        self.left[node] = self.right[node] = self.up[node] = -1
        self.flip[node] = False
        self.key[node] = key
        self.low[node] = node

    def _is_top(self, x):
        p = self.up[x]
        return p < 0 or (self.left[p] != x and self.right[p] != x)

    def _pull(self, x):
        key, low = self.key, self.low
        best = x
        child = self.left[x]
        if child >= 0 and key[low[child]] < key[best]:
            best = low[child]
        child = self.right[x]
        if child >= 0 and key[low[child]] < key[best]:
            best = low[child]
        low[x] = best

    def _push(self, x):
        if self.flip[x]:
            self.flip[x] = False
            left, right = self.right[x], self.left[x]
            self.left[x], self.right[x] = left, right
            if left >= 0:
                self.flip[left] = not self.flip[left]
            if right >= 0:
                self.flip[right] = not self.flip[right]

    def _rotate(self, x):
        up, left, right = self.up, self.left, self.right
        p = up[x]
        g = up[p]
        if not self._is_top(p):
            if left[g] == p:
                left[g] = x
            else:
                right[g] = x
        up[x] = g
        if left[p] == x:
            child = right[x]
            left[p] = child
            right[x] = p
        else:
            child = left[x]
            right[p] = child
            left[x] = p
        if child >= 0:
            up[child] = p
        up[p] = x
        self._pull(p)
        self._pull(x)

    def _splay(self, x):
        path = [x]
        y = x
        while not self._is_top(y):
            y = self.up[y]
            path.append(y)
        for y in reversed(path):
            self._push(y)
        up, left = self.up, self.left
        while not self._is_top(x):
            p = up[x]
            if not self._is_top(p):
                g = up[p]
                if (left[g] == p) == (left[p] == x):
                    self._rotate(p)
                else:
                    self._rotate(x)
            self._rotate(x)

    def _access(self, x):
        last = -1
        y = x
        while y >= 0:
            self._splay(y)
            self.right[y] = last
            self._pull(y)
            last = y
            y = self.up[y]
        self._splay(x)

    def _evert(self, x):
        self._access(x)
        self.flip[x] = not self.flip[x]

    def link(self, x, y):
        """Join the trees of ``x`` and ``y`` (which must differ) by the edge x-y."""
        self._evert(x)
        self.up[x] = y

    def cut(self, x, y):
        """Remove the edge x-y, which must be in the forest."""
        self._evert(x)
        self._access(y)
        # y's left subtree is now x alone.
        self.left[y] = -1
        self.up[x] = -1
        self._pull(y)

    def path_low(self, x, y):
        """The node with the smallest key on the path x..y (same tree)."""
        self._evert(x)
        self._access(y)
        return self.low[y]


class WindowGraph:
    """The sync-graph of the groups added since the last :meth:`expire` bound.

    Args:
        ranks: the workers (vertices); other ranks in a group are ignored.

    Groups are numbered by the caller in increasing order; :meth:`expire`
    drops every group numbered below a bound. Besides the link-cut tree, which
    finds the oldest edge on a path, every worker carries an explicit
    component label: a merge relabels the smaller component, and a split (an
    expired edge that was in the forest) relabels the smaller side, found by
    searching both sides of the cut edge in turn until one is exhausted. A
    label lookup is then a dictionary read.
    """

    def __init__(self, ranks):
        self._forest = _LinkCutForest()
        self._node = {}
        for r in ranks:
            self._node[r] = self._forest.add(_NEVER)
        self._ends = {}          # edge node in the forest -> its two vertex nodes
        self._by_group = collections.OrderedDict()  # group number -> its edge nodes (some may have left the forest)
        self._spare = []         # edge nodes out of the forest, to reuse
        self._newest = None
        self._label = {n: n for n in self._node.values()}      # vertex node -> component label
        self._members = {n: {n} for n in self._node.values()}  # label -> vertex nodes
        self._adjacent = {n: set() for n in self._node.values()}  # vertex node -> its forest neighbours
        self._labels = itertools.count(len(self._forest.key))   # fresh labels (no vertex node has them)

    @property
    def components(self):
        """Connected components among the ranks."""
        return len(self._members)

    def add(self, number, members):
        """Add group ``number`` (larger than every earlier one): its members become connected."""
        if self._newest is not None and number <= self._newest:
            raise ValueError("group numbers must increase: %r after %r" % (number, self._newest))
        self._newest = number
        nodes = [self._node[r] for r in members if r in self._node]
        forest, label = self._forest, self._label
        edges = []
        u = nodes[0] if nodes else None
        for v in nodes[1:]:
            if label[u] == label[v]:
                oldest = forest.path_low(u, v)
                if forest.key[oldest] >= number:
                    continue   # already joined by this group's own edges
                self._cut(oldest, split=False)   # the new edge joins the two sides again
            else:
                self._merge(label[u], label[v])
            edge = self._spare.pop() if self._spare else None
            if edge is None:
                edge = forest.add(number)
            else:
                forest.reuse(edge, number)
            forest.link(u, edge)
            forest.link(edge, v)
            self._ends[edge] = (u, v)
            self._adjacent[u].add(v)
            self._adjacent[v].add(u)
            edges.append(edge)
        self._by_group[number] = edges

    def expire(self, below):
        """Drop every group numbered below ``below``."""
        groups = self._by_group
        while groups and next(iter(groups)) < below:
            number, edges = groups.popitem(last=False)
            for edge in edges:
                if edge in self._ends and self._forest.key[edge] == number:
                    self._cut(edge, split=True)

    def _cut(self, edge, split):
        u, v = self._ends.pop(edge)
        self._forest.cut(u, edge)
        self._forest.cut(edge, v)
        self._spare.append(edge)
        self._adjacent[u].discard(v)
        self._adjacent[v].discard(u)
        if split:
            self._split(u, v)

    def _merge(self, a, b):
        """Components ``a`` and ``b`` become one (the smaller takes the larger's label)."""
        members = self._members
        if len(members[a]) < len(members[b]):
            a, b = b, a
        moved = members.pop(b)
        for n in moved:
            self._label[n] = a
        members[a] |= moved

    def _split(self, u, v):
        """The forest edge u-v is gone: the side of the two that is found
        complete first gets a new label."""
        adjacent = self._adjacent
        seen, todo = ({u}, {v}), ([u], [v])
        while True:
            for side in (0, 1):
                if not todo[side]:
                    small = seen[side]
                    old = self._label[u]
                    self._members[old] -= small
                    fresh = next(self._labels)
                    self._members[fresh] = small
                    for n in small:
                        self._label[n] = fresh
                    return
                x = todo[side].pop()
                for y in adjacent[x]:
                    if y not in seen[side]:
                        seen[side].add(y)
                        todo[side].append(y)

    def component(self, rank):
        """The label of ``rank``'s component: equal for two ranks exactly when
        they are connected (a label may change with :meth:`add` and :meth:`expire`)."""
        return self._label[self._node[rank]]

    def joined_by(self, members):
        """How many components the group ``members`` would merge into one."""
        return len({self.component(r) for r in members if r in self._node})
