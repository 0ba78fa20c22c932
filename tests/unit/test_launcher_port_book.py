"""Two launchers of one machine never get the same port (mxhet/launcher/ports.py)."""
import socket
import subprocess
import sys
import textwrap

import pytest

from mxhet.launcher import ports

HOLDER = textwrap.dedent("""
    import sys
    from mxhet.launcher import ports
    low, high, directory = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    got = ports.find_free_port(quiet=lambda: (low, high), directory=directory)
    print(got, flush=True)
    sys.stdin.readline()          # hold it until told to exit
""")


def _free_pair():
    """Two ports free now, next to each other where possible."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            low = sock.getsockname()[1]
        if low < 65535 and ports.bindable("127.0.0.1", low + 1):
            return low, low + 1
    pytest.skip("no two adjacent free ports")


def _hold(low, high, directory):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(low), str(high), str(directory)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def test_a_port_another_launcher_holds_is_never_handed_out_and_comes_free_at_its_exit(tmp_path):
    low, high = _free_pair()
    holder, held = _hold(low, high, tmp_path)
    try:
        assert held in (low, high)
        # the port is still bindable (nothing binds it yet): only the book keeps it
        assert ports.bindable("127.0.0.1", held)
        other = (low + high) - held
        for _ in range(20):
            got = ports.find_free_port(quiet=lambda: (low, high), directory=tmp_path)
            assert got == other
            ports.release(got)
        assert not ports.reserve(held, tmp_path)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # the kernel dropped the holder's lock with its process: no stale reservation
    assert ports.reserve(held, tmp_path)
    ports.release(held)


def test_one_launcher_never_gets_a_port_twice_and_says_when_none_is_left(tmp_path):
    low, high = _free_pair()
    first = ports.find_free_port(quiet=lambda: (low, high), directory=tmp_path)
    second = ports.find_free_port(quiet=lambda: (low, high), directory=tmp_path)
    try:
        assert {first, second} == {low, high}
        with pytest.raises(OSError, match="no free TCP port"):
            ports.find_free_port(quiet=lambda: (low, high), directory=tmp_path)
    finally:
        ports.release(first)
        ports.release(second)


def test_the_quiet_range_lies_above_the_kernels_ephemeral_range_and_pslites_retries(tmp_path):
    table = tmp_path / "range"
    table.write_text("32768\t60999\n")
    assert ports.quiet_port_range(table) == (61000, 65535)
    table.write_text("32768\t65000\n")
    assert ports.quiet_port_range(table) is None         # fewer than 1,000 left
    table.write_text("1024\t30000\n")
    assert ports.quiet_port_range(table) == (50000, 65535)
    assert ports.quiet_port_range(tmp_path / "missing") is None
