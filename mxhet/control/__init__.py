"""The control plane: ESync's State Server and its decision rule.

* :mod:`.state_rule` -- Algorithm 2 (QUERY-STATE / RESET) as pure code over
  plain records, with the clock passed in.
* :mod:`.messages` -- the versioned, validated JSON messages on the wire.
* :mod:`.server` -- the ZeroMQ ROUTER service around the rule.
* :mod:`.client` -- the worker's side (DEALER socket, poll with timeout).
"""
