"""A stored run, read: its log as stored (:class:`sim.store.StoredLog`) and what folds of
the log show: the world at any time, the canvas, the chart's figures.

The readers depend on the store's schema, not the other way round: :mod:`sim.store`
writes and reads the file, :mod:`actors.stored.rebuild` and :mod:`actors.stored.index` fold what it
reads, and this module, above both, is what ``barnraise.open_run`` hands out.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from actors.stored.index import LogIndex
from actors.stored.rebuild import pair_writes, world_at
from sim.metrics import events_frame
from sim.record import delegations_frame, record_repr
from sim.store import StoredLog
from sim.trace import EVENT

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["StoredRun"]


class StoredRun(StoredLog):
    """A read-only view of a store (see ``barnraise.open_run``): :class:`StoredLog`, and
    the folds of its log. A :class:`sim.record.RunRecord`: ``.events()`` and
    ``.delegations()`` are the frames ``RunResult`` gives for the same run."""

    def __repr__(self) -> str:
        last = self.last()
        return record_repr("StoredRun", self.summary, 0 if last is None else last.seq + 1,
                        path=self.path, status=self.status)

    def events(self) -> pd.DataFrame:
        """The run's domain events, one row each (:func:`sim.metrics.events_frame`'s
        columns; the raw log is :meth:`records`)."""
        return events_frame(self.records(kind=EVENT))

    def delegations(self) -> pd.DataFrame:
        """One row per task the run delegated (:data:`sim.record.DELEGATION_COLUMNS`):
        the store's delegations table (:meth:`StoredLog.delegation_rows`) as a frame.
        ``delivered_at``: when the task's ``task_result`` letter reached the delegator,
        or, for a result the stopped run had not delivered, when the resumed delegator
        read it from the task queue; NaN if neither happened."""
        return delegations_frame(self.delegation_rows())

    def world(self, at: float | None = None) -> dict[str, Any]:
        """Every session's world after each record at or before simulated time ``at``
        (default: the end), folded from the last snapshot before it and the log
        (:func:`actors.stored.rebuild.world_at`): canvas bytes and shape, members, claims, task
        statuses, checkpoints and the members' colours, by session id."""
        return world_at(self, at).state()

    def canvas(self, at: float | None = None, session_id: str | None = None
               ) -> np.ndarray[Any, Any] | None:
        """The canvas (``[y, x]`` tile codes) of ``session_id`` (default: the summary's
        session, else the first) after every record at or before simulated time ``at``
        (default: the end), folded from the snapshots and the log. None when that
        session has no canvas then."""
        world = self.world(at)
        if not world:
            return None
        sid = session_id
        if sid is None:
            summary = self.summary
            sid = summary.get("session_id") if summary else None
            if sid not in world:
                sid = next(iter(world))
        part = world.get(sid)
        if part is None or part.get("canvas") is None:
            return None
        return np.frombuffer(part["canvas"], dtype=np.uint8).reshape(part["shape"])

    def timeseries(self, interval: float = 1.0, session_id: str | None = None) -> Any:
        """The run's figures every ``interval`` simulated seconds (and at its last record),
        folded from the log, as a pandas DataFrame: ``t``, ``completion``,
        ``tiles_placed``, ``conflicts``, ``lost_work``, ``claims``, ``tasks_completed``,
        ``tasks_failed``, ``messages_delivered``, ``messages_dropped`` (the live view's
        chart; :class:`actors.stored.index.LogIndex` says where each comes from). One
        session's: ``session_id``, or the first the run opened. Mailbox depths are not
        in a log and not here. ValueError for an interval that is not a number > 0."""
        import pandas as pd  # an optional extra's weight, loaded when a frame is asked for

        if isinstance(interval, bool) or not isinstance(interval, (int, float)) \
                or not math.isfinite(interval) or interval <= 0:
            raise ValueError(f"interval must be a finite number of seconds > 0, "
                             f"got {interval!r}")
        last = self.last()
        end = 0.0 if last is None else last.t
        times = [i * interval for i in range(int(end // interval) + 1)]
        if not times or times[-1] < end:
            times.append(end)
        records = self.records()
        try:
            pairing = pair_writes(records)
        finally:
            records.close()
        index = LogIndex(self, pairing, samples=times, session=session_id)
        columns = ["t", "completion", "tiles_placed", "conflicts", "lost_work", "claims",
                   "tasks_completed", "tasks_failed", "messages_delivered", "messages_dropped"]
        return pd.DataFrame(index.series, columns=columns)
