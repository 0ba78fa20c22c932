"""Free ports for a job, never handed to two launchers of one machine at once.

A port the launcher finds free is bound only seconds later, by a scheduler or
worker that imports MXNet first. Two launchers starting together (two test
workers, two benches) each found the same port free and released it; one
scheduler's bind then failed, and the other job's workers greeted the wrong
scheduler (PS-LITE: ``Check failed: is_scheduler_``). So a launcher holds every
port it hands out for its whole life: an exclusive ``flock`` on one file per
port in a directory all launchers of the machine share. The kernel drops the
lock when the launcher exits, however it exits, so nothing is ever stale.

Ports are drawn from a range no bind to port 0 (the kernel's ephemeral range)
and no PS-LITE retry (10000-49999 at random) takes, where the machine leaves one:
another program's node cannot take the port in that window either.
"""
import os
import random
import socket
import stat
import tempfile

try:
    import fcntl
except ImportError:     # not Linux/BSD: no reservation, only the bind check
    fcntl = None

PSLITE_RANDOM_PORTS = (10000, 49999)
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
#: Shared by every user of the machine (sticky, like /tmp); a launcher that
#: cannot use it falls back to a directory of its own user's.
SHARED_DIR = os.path.join(tempfile.gettempdir(), "mxhet-ports")
_DRAWS = 256

# port -> open descriptor holding its lock, for this process's life
_held = {}


def quiet_port_range(path=EPHEMERAL_RANGE_FILE):
    """(low, high): ports above the kernel's ephemeral range and PS-LITE's
    random retries; None where the machine leaves fewer than 1,000 (or does
    not say)."""
    try:
        with open(path, encoding="ascii") as handle:
            _, ephemeral_high = (int(v) for v in handle.read().split())
    except (OSError, ValueError):
        return None
    low = max(ephemeral_high, PSLITE_RANDOM_PORTS[1]) + 1
    return (low, 65535) if 65535 - low >= 1000 else None


def bindable(host, port):
    """True if a TCP socket can bind ``(host, port)`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _book_dir(directory):
    if directory is not None:
        os.makedirs(directory, exist_ok=True)
        return directory
    try:
        os.makedirs(SHARED_DIR, mode=0o1777, exist_ok=True)
        info = os.stat(SHARED_DIR)
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != 0o1777:
            os.chmod(SHARED_DIR, 0o1777)    # makedirs' mode is masked by the umask
        if os.access(SHARED_DIR, os.W_OK | os.X_OK):
            return SHARED_DIR
    except OSError:
        pass
    own = "%s-%d" % (SHARED_DIR, os.getuid())
    os.makedirs(own, mode=0o700, exist_ok=True)
    return own


def reserve(port, directory=None):
    """Hold ``port`` for this process; False if another live process holds it.

    The files are never deleted: unlinking a locked file would let a process
    that opened it before lock a name nobody else sees.
    """
    if port in _held:
        return False            # handed out already: a plan must not get it twice
    if fcntl is None:
        _held[port] = None
        return True
    path = os.path.join(_book_dir(directory), str(port))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:
        return False            # another user's file we may not read: theirs
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held[port] = fd
    return True


def release(port):
    """Give back a port :func:`reserve` took (a launcher's ports go at its exit)."""
    fd = _held.pop(port, None)
    if fd is not None:
        os.close(fd)


def find_free_port(host="127.0.0.1", quiet=quiet_port_range, directory=None):
    """A TCP port free on ``host`` now and held for this process (:func:`reserve`).

    At random from ``quiet()``'s range where there is one, else one the kernel
    hands out (bind to port 0, then release).

    Raises:
        OSError: if no free port could be found in 256 draws.
    """
    span = quiet()
    rng = random.SystemRandom()
    for _ in range(_DRAWS):
        if span:
            port = rng.randint(*span)
            if not bindable(host, port):
                continue
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = sock.getsockname()[1]
        if reserve(port, directory):
            return port
    raise OSError("no free TCP port on %s in %d draws" % (host, _DRAWS))
