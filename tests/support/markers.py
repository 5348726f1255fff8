"""Assign the suite's markers from what each test uses, so no file has to remember them.

- ``cluster``: uses the ``start_cluster`` fixture, or lives in a ``test_cluster_*`` file;
- ``server``: uses a server fixture (``server``, ``server1``, ``server3``, ``server3zmq``,
  ``start_server``) or lives in a ``test_server_*`` / ``test_client_*`` /
  ``test_persistence_*`` file other than the in-process units;
- ``spark``: lives in a ``test_spark_*`` file;
- ``unit``: none of the above and no explicit marker of those kinds: runs in-process.

A marker written on a test or a file wins over these rules. The quick subset is
``pytest -m unit`` (well under a minute).
"""
import pytest

SERVER_FIXTURES = frozenset(("server", "server1", "server3", "server3zmq", "start_server"))
CLUSTER_FIXTURES = frozenset(("start_cluster",))
KINDS = ("unit", "server", "cluster", "spark")
SERVER_FILE_PREFIXES = ("test_server_", "test_client_", "test_persistence_", "test_fuzz_")
IN_PROCESS_FILES = frozenset(("test_persistence_units.py",))


def kind_of(item):
    if any(item.get_closest_marker(k) for k in KINDS):
        return None
    filename = item.path.name
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & CLUSTER_FIXTURES or filename.startswith("test_cluster_"):
        return "cluster"
    if filename.startswith("test_spark_"):
        return "spark"
    if fixtures & SERVER_FIXTURES:
        return "server"
    if filename.startswith(SERVER_FILE_PREFIXES) and filename not in IN_PROCESS_FILES:
        return "server"
    return "unit"


def assign_markers(items):
    for item in items:
        kind = kind_of(item)
        if kind is not None:
            item.add_marker(getattr(pytest.mark, kind))


# The suite runs in parallel (pytest-xdist; docs/tests.md). Each xdist worker takes whole test
# files (their module-scoped servers are started once), and the files that share something
# one process must own go to one worker together, one after the other: the fault harness'
# tests share the namespace names of faults/netns.py; the Spark tests share one JVM, whose
# compiler's warm-up (a third of its CPU on the first runs) is then paid once.
GROUPS = (("spark", ("test_spark_",)),
          ("netns", ("test_faults_", "test_cluster_announce")))

# Files that take a minute or more of a worker's time (measured with --durations): they
# start right after the groups, so that the short files fill the end of the run. A worker is
# handed its next file while it runs its last test, and that file waits behind it.
LONG_FILES = ("test_spill.py", "test_memory_levels.py", "test_cluster_secret.py",
              "test_fuzz_protocol.py", "test_cluster_fault.py", "test_persistence_cluster.py",
              "test_persistence_startup.py", "test_frameworks_celery.py")


def group_of_file(name):
    for group, prefixes in GROUPS:
        if name.startswith(prefixes):
            return group
    return None


def scope_of(nodeid):
    """The unit an xdist worker takes: the test's group, else its file."""
    path = nodeid.split("::", 1)[0]
    return group_of_file(path.rpartition("/")[2]) or path


def rank(name):
    """Where a file's unit starts: the groups in their order, then the long files, then the rest."""
    for i, (_, prefixes) in enumerate(GROUPS):
        if name.startswith(prefixes):
            return i
    if name in LONG_FILES:
        return len(GROUPS) + LONG_FILES.index(name)
    return len(GROUPS) + len(LONG_FILES)


def order(items):
    """The longest paths through the suite first, so that they start at once and the other
    files fill the other workers (a stable sort: each file keeps its tests' order)."""
    items.sort(key=lambda item: rank(item.path.name))


def make_scheduler(config, log):
    """xdist's scope scheduler with our scopes (`scope_of`). Its own --dist loadgroup
    marks a group by rewriting the node ids, which pytest 9 no longer takes."""
    from xdist.scheduler import LoadScopeScheduling

    class FileAndGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return scope_of(nodeid)

    return FileAndGroupScheduling(config, log)