"""What both kinds of front-end <-> worker link share (disque/workers/link.py, the default
over Unix socketpairs, and disque/workers/zmq_link.py over ZeroMQ): the sends held for a
restarting worker, and a worker's wait on its link and its timer."""


class HeldSends:
    """What both front-end link kinds share: while worker w restarts, what is sent to it is
    kept (in order) and sent once it serves again (disque.worker_restart)."""

    def __init__(self, nworkers):
        self.held = [None] * nworkers   # w -> payloads kept while worker w restarts
        self.starting = [False] * nworkers
        self.on_ready = None            # on_ready(w): a restarted worker said READY

    def send(self, w, payload):
        held = self.held[w]
        if held is not None:
            held.append(payload)
            return
        self.send_now(w, payload)

    def start_holding(self, w):
        if self.held[w] is None:
            self.held[w] = []
        self.starting[w] = True

    def release(self, w):
        """Worker w serves again: send what waited, in order."""
        held, self.held[w] = self.held[w], None
        for payload in held or ():
            self.send_now(w, payload)


def poll_waiter(poller, link):
    """wait(block) -> (link readable, timer fired) over a poller watching exactly the link and
    the timer fd; `link` is what the poller reports for the link (an fd or a ZeroMQ socket)."""
    def wait(block=True):
        link_ready = timer = False
        for what, _ in poller.poll(None if block else 0):
            if what is link or what == link:
                link_ready = True
            else:
                timer = True
        return link_ready, timer
    return wait
