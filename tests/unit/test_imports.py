"""The mxhet package's import layering: no cycle, and each package imports only the layers below it.

Only module-level imports count (an import inside a function is how a module
reaches MXNet or a heavier layer lazily). The layers are docs/layout.md's
"Import layering".
"""
import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mxhet"

# package (or top-level module) -> the mxhet packages it may import at module level
ALLOWED = {
    "errors": set(),
    "(root)": {"errors"},
    "policy": {"errors"},
    "protocol": {"errors", "policy"},
    "config": {"errors"},
    "checkpoint": {"errors"},
    "observe": {"errors"},
    "gluon_private": {"errors"},
    "contexts": {"errors", "policy"},
    "losses": {"errors", "policy"},
    "models": {"errors", "gluon_private"},
    "evaluation": {"errors", "gluon_private"},
    "data": {"(root)", "config", "errors"},
    "control": {"errors", "policy"},
    "state_server": {"errors", "control"},
    "dataplane": {"errors", "gluon_private", "policy"},
    "modes": {"control", "dataplane", "errors", "gluon_private", "policy", "protocol"},
    "trainer": {"config", "errors", "modes"},
    "mxnet_import": {"config", "errors"},
    "train": {"config", "errors", "evaluation", "gluon_private", "mxnet_import", "policy"},
    "launcher": {"config", "control", "errors", "observe", "policy"},
    "sim": {"config", "control", "dataplane", "errors", "gluon_private", "modes", "mxnet_import", "policy", "protocol",
            "train"},
    "kvstore_alias": {"errors"},
    "spares": {"errors"},
}

# What the simulator takes from the cluster's executors, each named: the one mode registry (a mode's
# program and spec), and two leftovers (issue 32: the simulator should not import cluster executors).
SIM_FROM_MODES = {"mxhet.modes", "mxhet.modes.registry", "mxhet.modes.base", "mxhet.modes.gcada"}


def _modules():
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return mods


def _top_level_imports(name, path, mods):
    """The mxhet modules ``name`` imports at module level (also under a top-level if/try)."""
    out = set()
    is_package = path.name == "__init__.py"
    for stmt in ast.parse(path.read_text(), str(path)).body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module
                targets = [module] + ["%s.%s" % (module, a.name) for a in node.names]
            else:
                continue
            out.update(t for t in targets if t in mods and t != name)
    return out


def _graph():
    mods = _modules()
    return {name: _top_level_imports(name, path, mods) for name, path in mods.items()}


def _layer(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "(root)"


def _cycle(graph):
    """One import cycle as a list of modules, or None."""
    state = {}
    stack = []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_the_walk_finds_the_package_modules_and_their_imports():
    graph = _graph()
    assert "mxhet.control.server" in graph and "mxhet.sim.engine" in graph
    assert "mxhet.control.rules" in graph["mxhet.control.server"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_import_cycle_between_mxhet_modules():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_each_package_imports_only_the_layers_below_it():
    bad = []
    for module, targets in sorted(_graph().items()):
        layer = _layer(module)
        assert layer in ALLOWED, "%s: add its layer to ALLOWED (and docs/layout.md)" % module
        bad += ["%s imports %s" % (module, t) for t in sorted(targets)
                if _layer(t) != layer and _layer(t) not in ALLOWED[layer]]
    assert not bad, "\n".join(bad)


def test_the_layers_themselves_have_no_cycle():
    assert _cycle(ALLOWED) is None


def test_the_simulator_takes_from_the_cluster_executors_only_what_is_named():
    graph = _graph()
    taken = {t for module, targets in graph.items() if _layer(module) == "sim"
             for t in targets if _layer(t) == "modes"}
    assert taken <= SIM_FROM_MODES, sorted(taken - SIM_FROM_MODES)


def test_the_control_plane_and_the_policies_import_no_executor_or_engine():
    graph = _graph()
    for module, targets in graph.items():
        if _layer(module) in ("control", "policy", "protocol", "dataplane"):
            assert not {_layer(t) for t in targets} & {"modes", "sim", "launcher", "train", "trainer"}, module
