"""The front-end process as parts (docs/design.md, "Front-end parts"); `Frontend`
(disque/frontend/node.py) is its root. Nothing is imported here: the server imports the
front-end's parts after it forked its workers (disque/server.py, Node.run)."""
