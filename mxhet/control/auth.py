"""ZeroMQ CURVE keys of a job's control plane.

The launcher creates, per job, a key directory readable only by its owner:

* ``server.key`` / ``server.key_secret``: the State Server's key pair;
* ``client.key`` / ``client.key_secret``: the workers' key pair;
* ``authorized/client.key``: the only client key the State Server accepts.

The State Server encrypts and authenticates with CURVE and accepts only
clients holding the workers' secret key (a ZAP handler checks the client's
public key); anything else gets no answer at all. This covers the control
plane only: MXNet's parameter-server channel stays unauthenticated.
"""
import os
import stat

import zmq.auth

SERVER, CLIENT, AUTHORIZED = "server", "client", "authorized"


def create_job_keys(directory):
    """Create the job's key pairs in ``directory`` (made 0700, files 0600)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    zmq.auth.create_certificates(directory, SERVER)
    zmq.auth.create_certificates(directory, CLIENT)
    authorized = os.path.join(directory, AUTHORIZED)
    os.makedirs(authorized, mode=0o700, exist_ok=True)
    with open(os.path.join(directory, CLIENT + ".key"), "rb") as src:
        public = src.read()
    with open(os.path.join(authorized, CLIENT + ".key"), "wb") as dst:
        dst.write(public)
    for root, _, files in os.walk(directory):
        os.chmod(root, 0o700)
        for name in files:
            os.chmod(os.path.join(root, name), stat.S_IRUSR | stat.S_IWUSR)
    return directory


def _load(directory, name, secret):
    path = os.path.join(directory, name + (".key_secret" if secret else ".key"))
    if not os.path.exists(path):
        raise ValueError("control-plane key file %s is missing" % path)
    return zmq.auth.load_certificate(path)


def secure_client(sock, directory):
    """Make ``sock`` a CURVE client of the job's State Server (before connect)."""
    public, secret = _load(directory, CLIENT, True)
    server_public, _ = _load(directory, SERVER, False)
    sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = public, secret, server_public


def secure_server(sock, directory, context):
    """Make ``sock`` a CURVE server accepting only the job's clients (before bind).

    Returns:
        The started authenticator thread; stop it when the socket is closed.
    """
    from zmq.auth.thread import ThreadAuthenticator

    public, secret = _load(directory, SERVER, True)
    auth = ThreadAuthenticator(context)
    auth.start()
    auth.configure_curve(domain="*", location=os.path.join(directory, AUTHORIZED))
    sock.curve_publickey, sock.curve_secretkey, sock.curve_server = public, secret, True
    return auth
