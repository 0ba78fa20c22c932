"""The virtual-time engine (:mod:`mxhet.sim.engine`) and its command line
(``python -m mxhet.sim``, :mod:`mxhet.sim.cli`): the same policies, State
Server and server-side updaters as a real job, real training, virtual time."""
