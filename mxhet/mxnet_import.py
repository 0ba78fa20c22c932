"""Import MXNet in about half the CPU time, reusing the bytecode of its operator functions.

``import mxnet`` writes the Python source of some 2,300 operator functions (``mx.nd.relu``,
``mx.sym.Convolution``, ``mx.np.ones``...) and compiles each one: about 1 CPU s of the 2 s the import
costs, in every process of a job (workers, servers; the bench's and the suite's jobs start thousands).
:func:`import_mxnet` keeps the compiled functions in one file and hands MXNet the stored bytecode on the
next import. The only value that differs between imports is the operator's handle (an address in
``libmxnet.so``) that each function passes to MXNet: it is compiled as a placeholder constant and set
in the stored bytecode. The key is the rest of the source, so a changed MXNet compiles afresh, never
uses stale bytecode. Any trouble with the file (missing, corrupt, unwritable) costs only the time saved.

Only processes that import MXNet through :func:`import_mxnet` before anything else imported it are
faster (mxhet's worker program, the servers, the simulator); a user's script that imports MXNet itself
imports it as always.
"""
import hashlib
import importlib.abc
import importlib.machinery
import logging
import marshal
import os
import sys
import types
import warnings

from .config import mxnet_cache_dir

LOG = logging.getLogger(__name__)

# The two MXNet modules that compile generated source (each with one exec; the mx.np registries call them).
GENERATING_MODULES = ("mxnet.ndarray.register", "mxnet.symbol.register")
# The calls in the generated source that carry the operator's handle as an integer literal.
HANDLE_CALLS = ("_imperative_invoke(", "_symbol_creator(")
_PLACEHOLDER = 10 ** 20 + 7   # no handle or other literal in the generated source is this integer

stats = {"hits": 0, "misses": 0, "loaded": 0, "saved": 0}
"""What the last :func:`import_mxnet` did: functions found in the file and compiled afresh, entries
the file held, entries written (0: the file was not rewritten)."""


def cache_path(cache_dir):
    """The file of this MXNet installation and Python bytecode version in ``cache_dir``."""
    import importlib.util
    spec = importlib.util.find_spec("mxnet")
    where = spec.origin if spec is not None and spec.origin else "mxnet"
    tag = hashlib.sha1(where.encode("utf-8")).hexdigest()[:12]
    return os.path.join(cache_dir, "mxnet-ops-%s-%s-O%d.marshal" % (
        tag, sys.implementation.cache_tag, sys.flags.optimize))


def _split_handle(source):
    """``(template, handle)``: the source with its handle literal replaced by the placeholder, and the
    handle (None where the source carries none, e.g. a signature-only function, or already holds the
    placeholder's digits: Python stores equal constants once, so the handle could not be told apart)."""
    if str(_PLACEHOLDER) in source:
        return source, None
    for call in HANDLE_CALLS:
        at = source.find(call)
        if at < 0:
            continue
        start = end = at + len(call)
        while end < len(source) and source[end].isdigit():
            end += 1
        if end > start:
            return source[:start] + str(_PLACEHOLDER) + source[end:], int(source[start:end])
        break
    return source, None


def _with_handle(code, handle):
    """``(code, count)``: ``code`` with every placeholder constant (in nested functions too) set to
    ``handle``, and how many it set."""
    consts, count = [], 0
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            const, inner = _with_handle(const, handle)
            count += inner
        elif type(const) is int and const == _PLACEHOLDER:
            const, count = handle, count + 1
        consts.append(const)
    return (code.replace(co_consts=tuple(consts)) if count else code), count


class _Bytecode:
    """The compiled templates: read from the file, added to on a miss, the ones used written back."""

    def __init__(self, entries):
        self.entries = entries
        self.used = {}

    def compile(self, source):
        template, handle = _split_handle(source)
        key = hashlib.sha1(template.encode("utf-8")).digest()
        code = self.entries.get(key)
        if code is None:
            code = self.entries[key] = compile(template, "<string>", "exec", dont_inherit=True)
            stats["misses"] += 1
        else:
            stats["hits"] += 1
        self.used[key] = code
        if handle is None:
            return code
        filled, count = _with_handle(code, handle)
        if count != 1:   # the template is not what this module expects: compile the source itself
            return compile(source, "<string>", "exec", dont_inherit=True)
        return filled

    def exec_function(self):
        """The ``exec`` the generating modules see: theirs, with their source compiled from the store."""
        def exec_(source, globals_=None, locals_=None):
            if globals_ is None:   # as the builtin: the caller's namespaces
                frame = sys._getframe(1)
                globals_ = frame.f_globals
                if locals_ is None:
                    locals_ = frame.f_locals
            if isinstance(source, str):
                source = self.compile(source)
            return exec(source, globals_, locals_)
        return exec_


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, exec_, patched):
        self.inner = inner
        self.exec_ = exec_
        self.patched = patched

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        # A module-level name comes before the builtin: the module's exec(...) calls ours, also when
        # MXNet's numpy registries call its functions later in the import.
        module.__dict__["exec"] = self.exec_
        self.patched.append(module)
        self.inner.exec_module(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, exec_):
        self.exec_ = exec_
        self.patched = []

    def find_spec(self, name, path, target=None):
        if name not in GENERATING_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, self.exec_, self.patched)
        return spec


def _load(path):
    try:
        with open(path, "rb") as f:
            entries = marshal.load(f)
    except FileNotFoundError:
        return {}
    except Exception as exc:  # noqa: BLE001  (a corrupt or foreign file is only a missed saving)
        LOG.debug("ignoring the bytecode file %s: %s", path, exc)
        return {}
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if isinstance(k, bytes) and isinstance(v, types.CodeType)}


def _save(path, entries):
    temporary = "%s.%d.tmp" % (path, os.getpid())
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "wb") as f:
            marshal.dump(entries, f)
        os.replace(temporary, path)   # readers see the old file or the new one, never half of one
    except OSError as exc:
        LOG.debug("could not write the bytecode file %s: %s", path, exc)
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return 0
    return len(entries)


LEAN_PROGRAMS = ("mxhet.train", "mxhet.sim", "kvstore_ext.server")
"""The programs (``python -m ...``) that run mxhet's code only: the default of :func:`import_mxnet`'s lean."""


def runs_lean_program(argv=None):
    """True where this process was started as ``python [options] -m PROGRAM`` with a program of
    :data:`LEAN_PROGRAMS` (``argv``: the interpreter's command line, default ``sys.orig_argv``, which
    names the module already while its package is being imported)."""
    argv = list(getattr(sys, "orig_argv", []) if argv is None else argv)
    index = 1
    while index < len(argv) - 1:
        word = argv[index]
        if word == "-m":
            return argv[index + 1] in LEAN_PROGRAMS
        if word == "-c" or not word.startswith("-"):   # a command or a script: no module
            return False
        index += 2 if word in ("-X", "-W") else 1   # the options whose value is the next word
    return False


def import_mxnet(cache_dir=None, lean=None):
    """``import mxnet``, with its operator functions' bytecode from ``cache_dir`` (None: from
    :func:`mxhet.config.mxnet_cache_dir`, ``MXHET_MXNET_CACHE``; empty: a plain import). The file is rewritten,
    with the entries this import used, only where something was compiled afresh.

    ``lean`` (None: :func:`runs_lean_program`), for processes that run mxhet's own code only (its worker
    program, the servers, the simulator): MXNet imports SciPy only to convert SciPy sparse matrices and
    for its quantization helpers, and distutils for version comparisons. Lean hides SciPy during the
    import (MXNet falls back as where SciPy is not installed) and gives MXNet the standard library's
    distutils, not the copy setuptools puts in its place (which imports setuptools): together about
    0.5-1 CPU s less (``bench/results/startup/import.json``). Imports after this one find SciPy as usual.

    Returns:
        the ``mxnet`` module.
    """
    for key in stats:
        stats[key] = 0
    if "mxnet" in sys.modules:
        return sys.modules["mxnet"]
    if lean is None:
        lean = runs_lean_program()
    hide_scipy = lean and "scipy" not in sys.modules
    shim = sys.modules.get("_distutils_hack") if lean and "distutils" not in sys.modules else None
    stdlib_distutils = (shim is not None and sys.version_info < (3, 12)
                        and hasattr(shim, "remove_shim") and hasattr(shim, "add_shim"))
    if hide_scipy:
        sys.modules["scipy"] = None
    if stdlib_distutils:
        shim.remove_shim()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The distutils package is deprecated",
                                    category=DeprecationWarning)
            return _import(mxnet_cache_dir() if cache_dir is None else cache_dir)
    finally:
        if hide_scipy:
            del sys.modules["scipy"]
        if stdlib_distutils:
            shim.add_shim()


def _import(cache_dir):
    if not cache_dir:
        import mxnet
        return mxnet
    path = cache_path(cache_dir)
    store = _Bytecode(_load(path))
    stats["loaded"] = len(store.entries)
    finder = _Finder(store.exec_function())
    sys.meta_path.insert(0, finder)
    try:
        import mxnet
    finally:
        sys.meta_path.remove(finder)
        for module in finder.patched:   # after the import, MXNet's modules use the builtin again
            module.__dict__.pop("exec", None)
    if stats["misses"]:
        stats["saved"] = _save(path, store.used)
    return mxnet
