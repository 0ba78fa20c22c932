"""``python -m mxhet.state_server``: run ESync's State Server standalone.

Example::

    python -m mxhet.state_server --bind tcp://127.0.0.1:5555 --num-workers 3

It exits when every registered worker has said goodbye, or on SIGTERM/SIGINT
(code 0), or with code 4 when a worker has been silent for longer than
``--heartbeat-timeout`` (its process hung or stopped): the launcher then ends
the job.
"""
import argparse
import logging
import signal
import sys

from .control import adsp
from .control.rules import ALL_RULES
from .control.server import DEFAULT_HEARTBEAT_TIMEOUT, SilentWorker, serve, write_stats

EXIT_SILENT_WORKER = 4
from .control.state_rule import DEFAULT_EPSILON


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mxhet.state_server", description=__doc__.splitlines()[0])
    parser.add_argument("--bind", required=True, help="ZeroMQ address, e.g. tcp://127.0.0.1:5555")
    parser.add_argument("--num-workers", type=int, required=True, help="number of workers (ranks 0..n-1)")
    parser.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON,
                        help="Algorithm 2's boundary constant, seconds (default %(default)s)")
    parser.add_argument("--staleness", type=int, default=2,
                        help="SSP: iterations a worker may be ahead of the slowest (default %(default)s)")
    parser.add_argument("--adsp-period", type=float, default=adsp.DEFAULT_PERIOD,
                        help="ADSP: check period Γ, seconds (default %(default)s)")
    parser.add_argument("--adsp-epoch", type=float, default=adsp.DEFAULT_EPOCH,
                        help="ADSP: seconds between commit-rate searches (default %(default)s)")
    parser.add_argument("--adsp-window", type=int, default=adsp.DEFAULT_WINDOW_PERIODS,
                        help="ADSP: check periods per evaluated commit rate (default %(default)s)")
    parser.add_argument("--heartbeat-timeout", type=float, default=DEFAULT_HEARTBEAT_TIMEOUT,
                        help="seconds of silence after which a worker counts as hung; 0 = never "
                             "(default %(default)s)")
    parser.add_argument("--elastic", action="store_true",
                        help="drop a silent worker from the job (the others train on) instead of exiting with code 4")
    parser.add_argument("--min-workers", type=int, default=1,
                        help="with --elastic: fewest workers still training that a death may leave; fewer fail "
                             "the job (default %(default)s)")
    parser.add_argument("--until-stopped", action="store_true",
                        help="serve on after every worker left, until ended (SIGTERM): mxhet-launch --max-restarts "
                             "passes it, so that a worker started again after the job's end is told so")
    parser.add_argument("--keys", default="",
                        help="the job's CURVE key directory: accept only clients holding its client key")
    parser.add_argument("--rules", default="all",
                        help="the rule plugins to load, comma-separated (%s), 'all' or 'none'; the launcher "
                             "passes the mode spec's state_rules (default %%(default)s)" % ", ".join(ALL_RULES))
    parser.add_argument("--round-deadline", type=float, default=0.0,
                        help="ESync: a round waits only for devices whose iteration takes at most D x the "
                             "fastest's (0: off, Algorithm 2; mxhet-launch passes the worker command's)")
    parser.add_argument("--round-length", type=float, default=0.0,
                        help="ESync, with --round-deadline: a round lasts at least about L iterations of the "
                             "fastest device (0: off; mxhet-launch passes the worker command's)")
    parser.add_argument("--late-memory", action="store_true",
                        help="ESync, with --round-deadline: the rounds a late device misses add its latest delta "
                             "again, at 1/N (mxhet-launch passes the worker command's)")
    parser.add_argument("--wait-needed", type=float, default=0.0,
                        help="ESync, with --round-deadline: the rounds also wait for a device whose training loss "
                             "on the global model is above R x the lowest device's (0: off; mxhet-launch passes "
                             "the worker command's)")
    parser.add_argument("--stats-out", default="", help="write per-round statistics (JSON) here on exit")
    args = parser.parse_args(argv)
    if args.num_workers < 1:
        parser.error("--num-workers must be >= 1, got %d" % args.num_workers)
    if not args.epsilon >= 0:
        parser.error("--epsilon must be >= 0 seconds, got %r" % args.epsilon)
    rules = (ALL_RULES if args.rules == "all" else () if args.rules == "none"
             else tuple(r.strip() for r in args.rules.split(",")))
    unknown = [r for r in rules if r not in ALL_RULES]
    if unknown:
        parser.error("--rules: unknown rule(s) %s; known: %s, or 'all' / 'none'" % (", ".join(unknown),
                                                                                 ", ".join(ALL_RULES)))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s state-server %(levelname)s %(message)s")
    stopping = []

    def _stop(signum, _frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        service = serve(args.bind, args.num_workers, epsilon=args.epsilon, should_stop=lambda: bool(stopping),
                        staleness=args.staleness, adsp_period=args.adsp_period, adsp_epoch=args.adsp_epoch,
                        adsp_window=args.adsp_window, heartbeat_timeout=args.heartbeat_timeout,
                        keys=args.keys, elastic=args.elastic, min_workers=args.min_workers, rules=rules,
                        until_stopped=args.until_stopped, round_deadline=args.round_deadline,
                        round_length=args.round_length, late_memory=args.late_memory,
                        wait_needed=args.wait_needed)
    except ValueError as exc:
        parser.error(str(exc))
    except SilentWorker as exc:
        logging.critical("%s; ending the job", exc)
        return EXIT_SILENT_WORKER
    if args.stats_out:
        write_stats(service, args.stats_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
