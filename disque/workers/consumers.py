"""Consumers blocked in GETJOB on this worker's queues (SPEC 3.2, 8.3): fetching, blocking,
serving them in blocking order as jobs arrive, their timeouts, and the front-end's UNBLOCK.

The front-end half is disque/frontend/getjob.py (`Getjobs`); `Shard.getjob` is the entry
for the front-end's GETJOBs. A connection this worker serves parks its GETJOB here too
(ServedCore.getjob_served), under a negative wait id: its reply goes to that connection
(`answer`), not to the front-end. Fetching, blocking, serving and expiring run in C
(disque/_fast/consumers.pyx, `ConsumersCore`); what is here is rare.
"""
from disque._fast.consumers import ConsumersCore
from disque._fast.resp import NULL_ARRAY
from disque.contracts import worker_link as link_msg


class Consumers(ConsumersCore):
    """Needs from the shard what ConsumersCore needs, and `shard.replication.cancel_replication`.
    Offers ConsumersCore's parts, unpark and unblock_client."""

    def unpark(self, client, wid):
        """A served connection's parked GETJOB ends with no reply (gone, handed back)."""
        b = self.by_client.get(client)
        if b is not None and b.reqid == wid:
            self.unblock(b)

    def unblock_client(self, client, reqid):
        """The front-end gave up on this consumer's GETJOB `reqid`. The answer is always
        the last message about that reqid: a null reply (local waiter) or the ack 0."""
        b = self.by_client.get(client)
        if b is not None and b.reqid == reqid:
            self.unblock(b)
            self.shard.out.append(
                link_msg.GetJobReply.encode(reqid, 0 if b.proxy else NULL_ARRAY, None))
        else:
            self.shard.replication.cancel_replication(reqid)      # an ADDJOB waiting for its copies
            self.shard.out.append(link_msg.GetJobReply.encode(reqid, 0, None))
