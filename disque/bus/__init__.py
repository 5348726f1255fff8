"""The cluster bus (ZeroMQ on port + 10000): membership, gossip and failure detection
(`cluster`, `nodes`), the transport (`transport`), and who may connect (`guard`, `secret`).
The front-end owns it (disque/frontend/cluster_relay.py); the message types are a contract
of their own (disque/contracts/bus_messages.py)."""
