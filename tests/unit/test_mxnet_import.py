"""mxhet.mxnet_import: MXNet's operator functions compiled once and reused, with each process's own
operator handles, and any trouble with the stored file costing only the time saved."""
import json
import os
import subprocess
import sys

import pytest

from mxhet import config
from mxhet.mxnet_import import _PLACEHOLDER, _Bytecode, _split_handle, _with_handle, cache_path, stats

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Imports MXNet through mxhet (the environment says where the file is) and reports: what the import did,
# operator functions that still hold the placeholder, and whether relu's function is what MXNet's own
# generator compiles for this process's handle of relu.
PROBE = r"""
import ctypes, json, sys, types
from mxhet.mxnet_import import _PLACEHOLDER, import_mxnet, stats
mx = import_mxnet()
from mxnet.base import _LIB, c_str, check_call
from mxnet.ndarray import register

def consts(code):
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from consts(c)
        else:
            yield c

left = []
for module in (mx.nd, mx.nd.op, mx.sym, mx.sym.op, mx.np, mx.npx, mx.nd.np, mx.sym.np):
    for name, f in vars(module).items():
        code = getattr(f, "__code__", None)
        if code is not None and any(type(c) is int and c == _PLACEHOLDER for c in consts(code)):
            left.append(name)
handle = ctypes.c_void_p()
check_call(_LIB.NNGetOpHandle(c_str("relu"), ctypes.byref(handle)))
source, _ = register._generate_ndarray_function_code(handle, "relu", "relu")
local = {}
exec(compile(source, "<string>", "exec"), vars(register), local)
fresh = local["relu"].__code__
same = mx.nd.relu.__code__.co_code == fresh.co_code and list(consts(mx.nd.relu.__code__)) == list(consts(fresh))
out = mx.nd.relu(mx.nd.array([-1.0, 2.0])).asnumpy().tolist()
sym = mx.sym.Convolution(mx.sym.var("x"), kernel=(3, 3), num_filter=2).list_arguments()
print(json.dumps({"stats": stats, "left": left, "same": same, "relu": out, "conv": sym,
                  "np": (mx.np.ones(3) * 2).asnumpy().tolist()}))
"""


def probe(cache):
    env = dict(os.environ, MXHET_MXNET_CACHE=str(cache), PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # the operators work and each function is MXNet's own for this process's handle
    assert result["relu"] == [0.0, 2.0] and result["np"] == [2.0, 2.0, 2.0], result
    assert result["conv"] == ["x", "convolution0_weight", "convolution0_bias"], result
    assert result["left"] == [] and result["same"], result
    return result["stats"]


def test_a_corrupt_file_is_compiled_afresh_and_replaced_and_the_next_import_compiles_nothing(tmp_path):
    with open(cache_path(str(tmp_path)), "wb") as f:
        f.write(b"\xe3not marshal")
    first = probe(tmp_path)
    assert first["loaded"] == 0 and first["misses"] > 2000, first   # MXNet 1.9.1: 2,334 templates
    assert first["saved"] == first["misses"], first   # aliases share a template: hits on a first import
    second = probe(tmp_path)
    assert second == {"hits": first["hits"] + first["misses"], "misses": 0, "loaded": first["saved"],
                      "saved": 0}, (first, second)


def test_off_keeps_no_file(tmp_path):
    env = dict(os.environ, MXHET_MXNET_CACHE="off", XDG_CACHE_HOME=str(tmp_path), HOME=str(tmp_path))
    code = "from mxhet.mxnet_import import import_mxnet, stats; import_mxnet(); print(stats)"
    done = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.listdir(str(tmp_path)) == [], os.listdir(str(tmp_path))
    assert "'misses': 0" in done.stdout and "'hits': 0" in done.stdout, done.stdout


def test_the_handle_is_the_only_part_of_the_source_left_out_of_the_key():
    a = "def f(x):\n    return _imperative_invoke(140234567890123, x, 'relu')\n"
    b = a.replace("140234567890123", "93875001234")
    assert _split_handle(a)[0] == _split_handle(b)[0] and _split_handle(b)[1] == 93875001234
    assert _split_handle("def g():\n    return 1234567890\n") == ("def g():\n    return 1234567890\n", None)
    store = _Bytecode({})
    namespace = {"_imperative_invoke": lambda handle, *rest: (handle,) + rest}
    for source, handle in ((a, 140234567890123), (b, 93875001234)):
        local = {}
        exec(store.compile(source), namespace, local)
        assert local["f"](7) == (handle, 7, "relu")
    assert len(store.entries) == 1
    store.compile(a.replace("'relu'", "'tanh'"))   # another operator's source is another entry
    assert len(store.entries) == 2


def test_a_source_that_holds_the_placeholders_digits_is_compiled_as_it_is():
    source = "def f():\n    return _symbol_creator(555555555555, %d)\n" % _PLACEHOLDER
    store = _Bytecode({})
    local = {}
    exec(store.compile(source), {"_symbol_creator": lambda *a: a}, local)
    assert local["f"]() == (555555555555, _PLACEHOLDER)
    code = compile("x = %d" % _PLACEHOLDER, "<string>", "exec")
    assert _with_handle(code, 3)[1] == 1


def test_the_file_is_named_for_the_installation_and_the_bytecode_version(tmp_path):
    path = cache_path(str(tmp_path))
    assert os.path.dirname(path) == str(tmp_path)
    assert sys.implementation.cache_tag in os.path.basename(path)


@pytest.mark.parametrize("env, expected", [
    ({"MXHET_MXNET_CACHE": "off", "XDG_CACHE_HOME": "/x"}, ""),
    ({"MXHET_MXNET_CACHE": "/c"}, "/c"),
    ({"XDG_CACHE_HOME": "/x"}, os.path.join("/x", "mxhet", "mxnet")),
    ({"XDG_CACHE_HOME": "relative/cache"}, ""),
])
def test_where_the_file_is_kept(env, expected):
    assert config.mxnet_cache_dir(env) == expected
    assert set(stats) == {"hits", "misses", "loaded", "saved"}


def test_a_lean_import_leaves_out_scipy_and_setuptools_and_later_imports_find_them(tmp_path):
    code = ("import sys, warnings; from mxhet.mxnet_import import import_mxnet\n"
            "with warnings.catch_warnings(record=True) as seen:\n"
            "    warnings.simplefilter('always'); mx = import_mxnet(lean=True)\n"
            "assert not [w for w in seen if 'distutils package' in str(w.message)], seen\n"
            "print('scipy' in sys.modules, mx.nd.sparse.spsp is None, 'setuptools' in sys.modules); "
            "from scipy.optimize import curve_fit; import _distutils_hack; "
            "print('scipy' in sys.modules, _distutils_hack.DISTUTILS_FINDER in sys.meta_path)")
    env = dict(os.environ, MXHET_MXNET_CACHE=str(tmp_path), PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "True", "False", "True", "True"], done.stdout


@pytest.mark.parametrize("argv, lean", [
    (["python", "-m", "mxhet.train", "--model", "smallcnn"], True),
    (["python", "-u", "-X", "importtime", "-W", "ignore", "-m", "kvstore_ext.server"], True),
    (["python", "-m", "mxhet.sim", "--mode", "esync"], True),
    (["python", "train.py", "-m", "mxhet.train"], False),   # a user's script, whatever its arguments
    (["python", "-c", "import mxhet"], False),
    (["python", "-m", "mxhet.launcher"], False),
    (["python"], False),
])
def test_a_lean_import_is_the_default_only_in_mxhets_own_programs(argv, lean):
    from mxhet.mxnet_import import runs_lean_program
    assert runs_lean_program(argv) is lean
