"""The run log: what a run writes to its store's event log and a follower reads back.

A part of its own between the run and its users (the agent's recovery, the web routes,
Celery): the records a run's events become (:mod:`._records`), the publisher that appends
them and lends the live events to the first follower (:mod:`._publish`, with the partial
output throttle and the in-process log of :mod:`._partials` and :mod:`._local_log`), and
the going-on of a recovered run's log after the dead worker's last record
(:mod:`._recovered`). It imports the run and the stores, never the agent nor the web.
"""
