"""The live view of a running job: a read-only web page and ``/api/state``.

``mxhet-launch --dashboard 127.0.0.1:8050 ...`` serves, for as long as the
job runs:

- ``/``: a page that polls ``/api/state`` every second and shows per device
  its slot, host, rank, context, slowdown, phase, current round, n_i of the
  last rounds, compute ratio, RTT, samples/s and which device the State Server
  takes for the slowest, and whether it is still in the job; for the job the
  rounds, elapsed time, the latest evaluated accuracy, the leaves and joins
  of an elastic job (time, slot, round, cause), and charts (plotly.js, served from the installed
  ``plotly`` package: nothing is fetched from the internet);
- ``/api/state``: the same state as JSON (:func:`mxhet.observe.live.build_state`).

The app is Flask, served by Werkzeug's threaded server in a daemon thread of
the launcher. Every route is GET-only and reads files; nothing can change
the job. Requests whose ``Host`` header is not the address the dashboard
listens on are refused (Flask's ``TRUSTED_HOSTS``), so a web page in the
user's browser cannot read the state through a DNS-rebinding name.
"""
import ipaddress
import logging
import os
import threading
import time

from ..errors import ConfigError
from .live import DEFAULT_INTERVAL_S, build_state

LOG = logging.getLogger("mxhet.dashboard")
DEFAULT_HOST = "127.0.0.1"
POLL_INTERVAL_MS = int(DEFAULT_INTERVAL_S * 1000)
"""How often the page asks for the state."""
_HERE = os.path.dirname(os.path.abspath(__file__))


def parse_address(text):
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT`` into ``(host, port)``; host 127.0.0.1 by default.

    Port 0 picks a free port. Hosts must be IP addresses (no name lookup).

    Raises:
        ConfigError: naming the bad value.
    """
    text = str(text).strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = DEFAULT_HOST, text
    host = host.strip("[]") or DEFAULT_HOST
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError("--dashboard host must be an IP address such as 127.0.0.1, got %r in %r"
                          % (host, text)) from None
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError("--dashboard port must be an integer in 0..65535, got %r in %r" % (port, text))
    return host, int(port)


def is_loopback(host):
    return ipaddress.ip_address(host).is_loopback


def plotly_js_dir():
    """The folder of the installed ``plotly`` package that holds ``plotly.min.js`` (MIT licence)."""
    import plotly
    return os.path.join(os.path.dirname(os.path.abspath(plotly.__file__)), "package_data")


class JobView:
    """What the dashboard knows about one job: the launcher's plan and its live directory.

    Args:
        devices: one dict per worker slot: ``slot``, ``host``, ``context``, ``slowdown``.
        live_dir: the directory the workers' feed files land in.
        mode: the sync mode.
        clock: monotonic clock in seconds (elapsed time counts from construction).
    """

    def __init__(self, devices, live_dir, mode="", clock=time.monotonic):
        self.devices = [dict(d) for d in devices]
        self.live_dir = live_dir
        self.mode = mode
        self.clock = clock
        self.started = clock()
        self.status = "running"
        self._lock = threading.Lock()

    def set_status(self, status):
        with self._lock:
            self.status = status

    def state(self):
        with self._lock:
            status = self.status
        return build_state(self.devices, self.live_dir, mode=self.mode,
                           elapsed_s=self.clock() - self.started, status=status)


def create_app(view, host=DEFAULT_HOST):
    """The Flask app over ``view`` (a :class:`JobView` or anything with ``state()``).

    ``host`` is the address it is served on: only requests naming it (or
    ``localhost`` for a loopback address) in their ``Host`` header are answered.
    """
    from flask import Flask, jsonify, render_template, send_from_directory

    app = Flask("mxhet.observe.dashboard", static_folder=os.path.join(_HERE, "static"),
                template_folder=os.path.join(_HERE, "templates"))
    # The Host header's name must be the address served (Werkzeug compares names, not ports);
    # on 0.0.0.0 / :: every name this machine answers to is possible, so none is checked.
    if not ipaddress.ip_address(host).is_unspecified:
        names = {host, "[%s]" % host} | ({"localhost", "127.0.0.1", "[::1]"} if is_loopback(host) else set())
        app.config["TRUSTED_HOSTS"] = sorted(names)
    vendor = plotly_js_dir()

    @app.after_request
    def _headers(response):
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        # plotly.js sets inline styles; no inline or foreign script runs
        response.headers["Content-Security-Policy"] = ("default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                                       "img-src 'self' data:; connect-src 'self'")
        return response

    @app.get("/")
    def index():
        return render_template("dashboard.html", poll_ms=POLL_INTERVAL_MS)

    @app.get("/api/state")
    def api_state():
        return jsonify(view.state())

    @app.get("/vendor/plotly.min.js")
    def plotly_js():
        return send_from_directory(vendor, "plotly.min.js", mimetype="text/javascript", max_age=3600)

    return app


class Dashboard:
    """Serves :func:`create_app` in a daemon thread until :meth:`stop`.

    Args:
        view: the :class:`JobView`.
        host: IP address to listen on (default loopback; any other address
            exposes the job's state to that network, and a warning says so).
        port: TCP port (0 = a free one; :attr:`url` tells which).

    Raises:
        ConfigError: when the address cannot be bound.
    """

    def __init__(self, view, host=DEFAULT_HOST, port=0):
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request in the job's log
        if not is_loopback(host):
            LOG.warning("the dashboard listens on %s, not on loopback: anyone who can reach it sees the "
                        "job's state (read-only)", host)
        self.view = view
        def not_yet(environ, start_response):  # replaced before the server thread starts
            start_response("503 Service Unavailable", [])
            return [b""]
        try:
            # bind first (port 0 = a free port), then build the app for the port actually bound
            self._server = make_server(host, port, not_yet, threaded=True)
        except OSError as exc:
            raise ConfigError("--dashboard cannot listen on %s:%d: %s" % (host, port, exc)) from None
        self.host, self.port = host, self._server.socket.getsockname()[1]
        self._server.app = create_app(view, host)
        self._thread = threading.Thread(target=self._server.serve_forever, name="mxhet-dashboard", daemon=True)

    @property
    def url(self):
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "http://%s:%d/" % (host, self.port)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
