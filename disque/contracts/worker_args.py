"""What a worker process is told when it starts (disque/worker_spawn.py): on the command
line of a new interpreter, or as is to a fork of the front-end."""
import json


class WorkerArgs:
    """What a worker process is told: on the command line of a new interpreter
    (`argv`, parsed back by disque.workers.process.parse_args), or as is to a fork."""
    __slots__ = ("index", "workers", "link", "node_id", "config", "peers", "job_links",
                 "job_links_tls")

    def __init__(self, index, workers, link, node_id, config, peers="", job_links=None,
                 job_links_tls=None):
        self.index = index
        self.workers = workers
        self.link = link                # "unix:<fd>,<fd>" or "zmq:<endpoint>"
        self.node_id = node_id          # str
        self.config = config            # dict
        self.peers = peers              # "<worker>:<fd>,..."
        self.job_links = job_links      # fd of the job links' listening socket, or None
        self.job_links_tls = job_links_tls

    def argv(self):
        out = ["--index", str(self.index), "--workers", str(self.workers), "--node-id",
               self.node_id, "--config", json.dumps(self.config), "--link", self.link,
               "--peers", self.peers]
        if self.job_links is not None:
            out += ["--job-links", str(self.job_links)]
        if self.job_links_tls is not None:
            out += ["--job-links-tls", self.job_links_tls]
        return out
