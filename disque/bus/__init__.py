"""Cluster bus (ZeroMQ on port + 10000): gossip and job messages. Built by the cluster issue;
a single node needs none of it, and ADDJOB with REPLICATE > 1 answers -NOREPL until then."""
