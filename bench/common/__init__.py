"""The benchmarks' harness (bench/*.py import it, never another script): nodes through
disque.harness, with the CPU accounting and the original C binary's command line (servers),
the loads that drive them (loads, cluster), the machine's other load (machine), the shared
options of the single-node loads (options) and the progress lines (report).

A script is run as `python bench/<script>.py`, which puts bench/ on the path: `from common
import ...` needs no more."""

# SIGTERM (a timeout, a kill), SIGHUP and SIGINT end any benchmark through its `finally`
# blocks, which stop the nodes it started (common.servers.stop_on_signals)
from common.servers import stop_on_signals as _stop_on_signals  # noqa: E402

_stop_on_signals()
