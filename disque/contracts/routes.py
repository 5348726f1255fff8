"""How a command is routed: the one enumeration that disque/commands.py names for each
command and that both command loops dispatch on (the front-end's `frontcore.Core.route` and
a worker's served loop, `servedcore.ServedCore.execute`), through the one dispatch kernel,
disque/_fast/dispatch.pyx.

  LOCAL   the front-end answers it (node-level commands; a served loop hands it back,
          PING apart)
  QUEUE   the worker owning the slot of argv[1] (a queue name)
  ID      the worker owning the slot carried by the job ID in argv[1]
  IDS     every job ID in argv[1:] to its worker; integer replies summed
  GETJOB  GETJOB's own routing and blocking logic
  ALL     every worker (replies merged by the front-end)
"""
LOCAL, QUEUE, ID, IDS, GETJOB, ALL = range(6)

# commands a worker executes whole, through its `worker` handler
WORKER_ROUTES = (QUEUE, ID, IDS)

NAMES = {LOCAL: "local", QUEUE: "queue", ID: "id", IDS: "ids", GETJOB: "getjob", ALL: "all"}
