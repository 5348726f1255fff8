"""The front-end's control messages to a worker (contracts/worker_link.py, Control): one
handler per name, `handler(worker, arg) -> answer`, in one table (docs/design.md, "The
worker's loop"). An unknown name is an error the front-end gets back."""
import os
import time

from disque import memstat
from disque.workers.queue_report import (group_report, job_page, queue_names, queue_report,
                                         queue_rows, queued_ids, search)


def control_info(worker, _arg):
    """INFO's figures of this worker (disque/info.py)."""
    shard = worker.shard
    info = shard.info()
    cpu = os.times()            # this process: user and system seconds
    info.update(pid=os.getpid(), rss=memstat.rss(), used_memory=shard.memory.memory_used(),
                cpu_user=cpu.user, cpu_sys=cpu.system,
                ops=worker.ops, index=worker.index, uptime_s=time.time() - worker.started,
                tick_ms=worker.tick_ms(), loop_turns=worker.loop_turns,
                aof=shard.persistence.aof_info())
    if worker.served is not None:
        info["served"] = worker.served.totals()
    if worker.job_links is not None:
        info["job_links"] = worker.job_links.info()
    return info


def control_queues(worker, arg):
    """The dashboard's queue list (docs/metrics.md)."""
    return queue_report(worker.shard, arg) if type(arg) is int else queue_report(worker.shard, *arg)


def control_cluster(worker, arg):
    """The membership changed (Replication.set_cluster, the job links' peers)."""
    state = worker.shard.replication.set_cluster(arg)
    if worker.job_links is not None:
        worker.job_links.set_cluster(state)
    return True


def control_memory(worker, arg):
    """Every ~100 ms: the levels and limits in (Memory.set_memory), this worker's figures
    and its AOF status out (disque/frontend/memory.py)."""
    shard = worker.shard
    shard.memory.set_memory(*arg)
    return shard.memory.memory_report() + [shard.persistence.aof_status()]


def control_flushall(worker, _arg):
    shard = worker.shard
    shard.persistence.aof_flushall()    # DELJOB records first (SPEC 4.4)
    shard.flushall()
    return True


def control_shutdown(worker, _arg):
    worker.running = False
    return True


def control_tls_config(worker, arg):
    """tls-port: the settings of the TLS connections this worker runs (tls_clients.py)."""
    if worker.served is None:
        return {"error": "TLS needs worker-link unix"}
    return worker.served.tls.configure(arg)


def control_served_config(worker, arg):
    """connection-affinity: see ServedClients.configure."""
    if worker.served is not None:
        worker.served.configure(arg)
    return worker.served is not None


CONTROLS = {
    "info": control_info,
    "queues": control_queues,
    "queue_names": lambda worker, arg: queue_names(worker.shard, *arg),     # the console
    "queue_rows": lambda worker, arg: queue_rows(worker.shard, arg),
    "jobs": lambda worker, arg: job_page(worker.shard, *arg),
    "groups": lambda worker, arg: group_report(worker.shard, *arg),
    "search": lambda worker, arg: search(worker.shard, *arg),
    "queued_ids": lambda worker, arg: queued_ids(worker.shard, *arg),
    "scan": lambda worker, arg: worker.shard.scan(*arg),      # QSCAN / JSCAN: Shard.scan
    "cluster": control_cluster,
    "memory": control_memory,
    "flushall": control_flushall,
    "shutdown": control_shutdown,
    "ping": lambda worker, arg: True,
    "tls_config": control_tls_config,
    "served_config": control_served_config,
}
AOF_PREFIX = "aof_"     # every aof_* name: disque.workers.persistence, Persistence.aof_control


def run_control(worker, name, arg):
    handler = CONTROLS.get(name)
    if handler is not None:
        return handler(worker, arg)
    if name.startswith(AOF_PREFIX):
        return worker.shard.persistence.aof_control(name, arg)
    raise ValueError("unknown control %r" % name)
