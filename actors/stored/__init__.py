"""A stored run, read: the readers that combine the services' folds of its log.

Each service owns the fold of its own state from a stored log, beside it in ``actors/``
(``regions_log``, ``taskqueue_log``, ``coordinator_log``, ``coordination_log``); the log's
one decoder and call/answer pairing are :mod:`barnraise.sim.log`'s. The readers here drive those
folds over a log and put their parts together:

* :mod:`barnraise.actors.stored.resume`: what every service held when a realtime run stopped
  (:func:`~barnraise.actors.stored.resume.image_of`), for ``Simulation.restore``;
* :mod:`barnraise.actors.stored.rebuild`: the world at any simulated time
  (:func:`~barnraise.actors.stored.rebuild.world_at`), from the snapshots and the log;
* :mod:`barnraise.actors.stored.index`: one pass for what snapshots do not keep, the task graph's
  edges and the chart's figures (:class:`~barnraise.actors.stored.index.LogIndex`, the task
  :func:`~barnraise.actors.stored.index.board`);
* :mod:`barnraise.actors.stored.run`: :class:`~barnraise.actors.stored.run.StoredRun`, what
  ``barnraise.open_run`` hands out.
"""
