"""The benchmarks' harness (bench/*.py import it, never another script): nodes through
disque.harness, with the CPU accounting and the original C binary's command line (servers),
the loads that drive them (loads, cluster), the machine's other load (machine), the shared
options of the single-node loads (options) and the progress lines (report).

A script is run as `python bench/<script>.py`, which puts bench/ on the path: `from common
import ...` needs no more."""
