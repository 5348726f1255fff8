"""The contracts between processes, each in one home (docs/design.md, "Contracts between
processes"). Both sides of a contract import it from here; neither side owns it.

- worker_link:   front-end <-> worker requests, replies and their framing on the link
- bus_messages:  cluster bus message types (explicit numbers, also read by the Cython core)
- job_codec:     the serialized job (SPEC 11), as REPLJOB/YOURJOBS and AOF records carry it
- aof_format:    the AOF files: names, records, how they are read, the directory fsync rule
"""
