"""Observability: what a running job shows while it runs.

- :mod:`.live`: the live feed, one small JSON file per worker, rewritten
  atomically about once a second, and the pure function that merges the feed
  with the launcher's plan into the dashboard's state;
- :mod:`.dashboard`: the read-only web page and ``/api/state`` (Flask), served
  by the launcher with ``--dashboard``;
- :mod:`.tensorboard`: per-device and job scalars as TensorBoard event files
  (``python -m mxhet.train --tensorboard DIR``, ``python -m mxhet.sim --tensorboard DIR``);
- :mod:`.worker`: the one object the training loop calls, which feeds both.

Nothing here imports MXNet.
"""
