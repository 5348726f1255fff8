"""What a fault scenario is: a schedule of faults plus how its nodes run. The harness
(faults/harness.py) reads these fields; the catalogue (faults/catalog.py) names them."""
from dataclasses import dataclass, field
from typing import Callable, Optional


@dataclass
class Scenario:
    # schedule(ctx, until): inject faults until `until` (monotonic), leave them in place;
    # the harness heals the network, resumes and restarts nodes afterwards
    schedule: Callable
    aof: Optional[str] = None           # None, "everysec" or "always"
    # per node i: extra environment (libfaketime) and extra server arguments
    node_env: Callable = field(default=lambda ctx, i: {})
    node_args: Callable = field(default=lambda ctx, i: [])
    spares: int = 0                     # nodes started beside the cluster, not joined
    prepare: Callable = field(default=lambda ctx: None)   # before the nodes start
    heal: Callable = field(default=lambda ctx: None)      # extra healing (disks, clocks)
    finish: Callable = field(default=lambda ctx: None)    # after the nodes stop, always
    settled: Callable = field(default=lambda ctx: None)   # after the drain, nodes still up
    ours_only: bool = False             # needs worker processes: not run on the original
    # extra workload arguments (faults/workload.py), e.g. the timing probes
    workload_args: Callable = field(default=lambda ctx: [])
    summary: str = ""
