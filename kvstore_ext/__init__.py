"""What runs inside or beside MXNet's PS-LITE servers.

* :mod:`kvstore_ext.updaters` -- server-side update rules, registered as
  ``mx.optimizer.Optimizer`` subclasses and shipped to the servers through
  MXNet's own ``KVStore.set_optimizer`` channel.
* :mod:`kvstore_ext.keys` -- the key layout shared by workers and servers.
* :mod:`kvstore_ext.probe` -- the start-up check that the servers really run
  the updater (MXNet silently stores the plain sum of pushes when they cannot
  unpickle it).
* :mod:`kvstore_ext.server` -- ``run_server()``, the entry point of the
  scheduler and server processes.

Importing this package has no side effects: nothing is started.
"""
