"""The per-worker job figures that both `/metrics` (prom.py) and the dashboard's JSON views
(views.py) show, kept apart from prom.py so the views need not import prometheus_client
(the front-end imports the views at start-up, prometheus_client only with metrics-port)."""

# worker stats key -> (counter name without _total, help)
JOB_COUNTERS = (
    ("added", "disque_jobs_added",
     "Jobs created by ADDJOB on this node (copies from other nodes are not counted)."),
    ("delivered", "disque_jobs_delivered", "Jobs handed to consumers by GETJOB."),
    ("acked", "disque_jobs_acked", "Jobs acknowledged (ACKJOB, FASTACK or a cluster ack)."),
    ("nacked", "disque_jobs_nacked", "Jobs given back by NACK."),
    ("requeued", "disque_jobs_requeued", "Jobs queued again after their retry time."),
    ("expired", "disque_jobs_expired", "Jobs dropped at the end of their TTL."),
    ("deleted", "disque_jobs_deleted", "Jobs deleted (DELJOB, acks garbage-collected)."),
    # Hook: when the shard counts jobs moved to a dead-letter queue under this key, the
    # counter appears with no change here.
    ("dead_lettered", "disque_jobs_dead_lettered", "Jobs moved to a dead-letter queue."),
)


def counter_value(w, key):
    """A worker's job counter; dead_lettered comes by origin queue and counts as its sum."""
    value = w.get(key, 0)
    return sum(value.values()) if isinstance(value, dict) else value


def active(w):
    """Jobs neither queued nor held behind their group's head."""
    return w.get("active", max(0, w.get("jobs", 0) - w.get("queued", 0) - w.get("group_held", 0)))
