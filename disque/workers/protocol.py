"""Messages between the front-end and its workers, whichever transport carries them
(disque.workers.link: a socketpair by default, or ZeroMQ with `worker-link zmq`).

Every link message carries a msgpack list of requests (front-end -> worker) or replies
(worker -> front-end): everything that arrived in one event-loop tick travels together.

Requests:
  [CMD, reqid, argv]                      a whole command; reply [reqid, resp_bytes]
  [GETJOB, reqid, client, count, nohang, withcounters, timeout_ms, proxy, queues]
        local (proxy=0): reply [reqid, resp_bytes, job_ids], possibly much later
        proxy (proxy=1): reply [reqid, [encoded jobs], job_ids] now (empty list: blocked
        or nothing), then at most one offer [reqid, [encoded job], [id]] later
  [UNBLOCK, client, reqid]                forget a blocked consumer's GETJOB; the reply
                                          [reqid, null-array-or-0, None] is the last
                                          message about that reqid
  [RETURN, job_ids]                       put fetched-but-undelivered jobs back; no reply
  [BUS, [[sender_id, type, flags, payload], ...]]
                                          cluster bus messages about this worker's jobs
                                          and queues; no reply. The worker's own bus
                                          messages travel in its reply batches as
                                          [BUS_REQID, [(dest ids or None, type, flags, payload)]]
  [CONTROL, reqid, name, arg]             node-level operation; reply [reqid, value]
        names: info, flushall, shutdown, ping; scan (a QSCAN/JSCAN share, Shard.scan);
        cluster (membership for Shard.set_cluster);
        memory (every ~100 ms: [level, excess, noeviction] in, memory figures and scan-log
        sequence numbers out, Shard.set_memory / Shard.memory_report)
"""
CMD = 0
GETJOB = 1
UNBLOCK = 2
RETURN = 3
CONTROL = 4
BUS = 5
BUS_REQID = -1     # worker -> front-end entry [BUS_REQID, [(dests, type, flags, payload)...]]

READY = b"READY"   # first message of a worker: it is connected and loaded
