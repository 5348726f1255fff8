"""Every hook a Cython core calls on the Python layer is declared in its .pxd and bound
(docs/design.md, "Front-end parts" and "Shard parts").

The cores call the parts through C fields declared `cdef public object` in their .pxd;
the composition root binds each one once. A call to `self.<name>(...)` in a .pyx that is
neither defined in the .pyx nor declared in the .pxd fails here, and so does a declared
hook the root leaves unbound.
"""
import asyncio
import pathlib
import re

import pytest

from disque import config as config_mod
from disque.frontend.node import CORE_HOOKS, PARTS, Frontend

pytestmark = pytest.mark.unit

FAST = pathlib.Path(__file__).resolve().parent.parent / "disque" / "_fast"


def undefined_self_calls(stem):
    pyx = (FAST / f"{stem}.pyx").read_text()
    defined = set(re.findall(r"^\s*(?:c?p?def)\s+(?:[\w\*\[\]]+\s+)*?(\w+)\s*\(", pyx, re.M))
    calls = set(re.findall(r"self\.(\w+)\(", pyx)) | set(re.findall(r"\bfe\.(\w+)\(", pyx))
    return calls - defined


def declared_hooks(stem):
    pxd = (FAST / f"{stem}.pxd").read_text()
    # a hook is declared with its arguments as the comment: `cdef public object x  # (a, b)`
    return set(re.findall(r"cdef public object (\w+)\s+# \(", pxd))


def declared_names(stem):
    pxd = (FAST / f"{stem}.pxd").read_text()
    return set(re.findall(r"\b(\w+)\b", pxd))


def test_the_scan_finds_the_front_end_hooks():
    assert {"getjob", "route_ids", "client_connected"} <= undefined_self_calls("frontcore")


@pytest.mark.parametrize("stem", ["frontcore", "shardcore", "peerlinks"])
def test_every_python_hook_the_core_calls_is_declared(stem):
    missing = {name for name in undefined_self_calls(stem) if name not in declared_names(stem)}
    assert not missing, f"{stem}.pyx calls undeclared {sorted(missing)}: declare them in {stem}.pxd"


def test_the_front_end_binds_every_declared_hook_to_a_part():
    hooks = declared_hooks("frontcore")
    assert set(CORE_HOOKS) == hooks
    for hook, handler in CORE_HOOKS.items():
        part, method = handler.split(".")
        assert callable(getattr(PARTS[part], method, None)), handler


def test_a_built_front_end_has_every_hook_bound(tmp_path):
    cfg = config_mod.parse_command_line(["--dir", str(tmp_path), "--port", "7711"])
    loop = asyncio.new_event_loop()
    try:
        fe = Frontend(cfg, b"a" * 40, links=None, nworkers=2, loop=loop)
        for hook, handler in CORE_HOOKS.items():
            bound = getattr(fe, hook)
            part, method = handler.split(".")
            assert bound is not None, hook
            assert bound.__self__ is getattr(fe, part) and bound.__name__ == method, hook
    finally:
        loop.close()


def test_no_part_shadows_a_name_of_the_core():
    """A part stored under a name the Cython core already uses (a cpdef method such as
    `dispatch`, a field) would silently replace it."""
    from disque._fast.frontcore import Core
    core_names = set(dir(Core))
    assert not core_names & set(PARTS)


def test_the_shard_binds_every_declared_hook():
    from disque.workers.shard import SHARD_HOOKS, Shard
    assert set(SHARD_HOOKS) == declared_hooks("shardcore")
    shard = Shard(0, 1, b"a" * 40, {})
    for hook, handler in SHARD_HOOKS.items():
        # "part.method" on one of the shard's parts, or "method" on the shard itself
        *part, method = handler.split(".")
        owner = getattr(shard, part[0]) if part else shard
        bound = getattr(shard, hook)
        assert bound is not None, hook
        assert bound.__self__ is owner and bound.__name__ == method, hook


def test_the_served_halves_call_only_declared_hooks():
    """The served loop and its dispatch (servedloop.pyx, servedcore.pyx; one class chain)
    call the Python half only through hooks declared in their .pxd files."""
    defined = set()
    calls = set()
    for stem in ("servedloop", "servedcore"):
        pyx = (FAST / f"{stem}.pyx").read_text()
        defined |= set(re.findall(r"^\s*(?:c?p?def)\s+(?:[\w\*\[\]]+\s+)*?(\w+)\s*\(", pyx, re.M))
        calls |= set(re.findall(r"self\.(\w+)\(", pyx))
        assert "<object>self" not in pyx, f"{stem}.pyx calls its subclass by name: declare a hook"
    declared = declared_names("servedloop") | declared_names("servedcore")
    assert {"drop_client", "hand_back_client", "getjob_of_peer"} <= calls - defined
    missing = {name for name in calls - defined if name not in declared}
    assert not missing, f"the served core calls undeclared {sorted(missing)}"


def test_served_clients_bind_every_declared_hook(tmp_path):
    import socket
    from disque.workers.served_clients import SERVED_HOOKS, ServedClients
    from disque.workers.shard import Shard
    assert set(SERVED_HOOKS) == declared_hooks("servedloop") | declared_hooks("servedcore")
    a, b = socket.socketpair()
    link, timer = socket.socketpair()
    try:
        served = ServedClients(0, 1, Shard(0, 1, b"a" * 40, {}), a, link.fileno(),
                               timer.fileno())
        for hook, method in SERVED_HOOKS.items():
            bound = getattr(served, hook)
            assert bound is not None, hook
            assert bound.__self__ is served and bound.__name__ == method, hook
            # a method named like its hook shadows the C field: setattr then fills the
            # instance's dict and the loop calls None
            assert hook not in vars(served), hook
        served.ep.close()
    finally:
        for s in (a, b, link, timer):
            s.close()


def test_the_peer_links_bind_every_declared_hook():
    """PeerLinks (peerlinks.pyx) calls its owner, ServedClients, through the hooks
    peer_links() binds from PEER_HOOKS."""
    import select
    import socket
    from disque.workers.peer_links import PEER_HOOKS, peer_links
    from disque.workers.served_clients import ServedClients
    assert set(PEER_HOOKS) == declared_hooks("peerlinks")

    class Owner:
        def __getattr__(self, name):
            return getattr(ServedClients, name).__get__(self)
    owner = Owner()
    a, b = socket.socketpair()
    ep = select.epoll()
    try:
        links = peer_links(0, {1: a}, ep, owner)
        for hook, method in PEER_HOOKS.items():
            bound = getattr(links, hook)
            assert bound is not None, hook
            assert bound.__self__ is owner and bound.__name__ == method, hook
    finally:
        links.close()
        b.close()
        ep.close()


def test_the_replication_binds_every_declared_hook():
    """ReplicationCore calls the Python handlers of job messages through hooks declared in
    replcore.pxd, bound from REPLICATION_HOOKS ("method" of the Replication, or a path
    through its parts such as "shard.federation.on_needjobs")."""
    from disque.workers.replication import REPLICATION_HOOKS
    from disque.workers.shard import Shard
    missing = {name for name in undefined_self_calls("replcore")
               if name not in declared_names("replcore")}
    assert not missing, f"replcore.pyx calls undeclared {sorted(missing)}"
    assert set(REPLICATION_HOOKS) == declared_hooks("replcore")
    replication = Shard(0, 1, b"a" * 40, {}).replication
    for hook, handler in REPLICATION_HOOKS.items():
        *path, method = handler.split(".")
        owner = replication
        for name in path:
            owner = getattr(owner, name)
        bound = getattr(replication, hook)
        assert bound is not None, hook
        assert bound.__self__ is owner and bound.__name__ == method, hook


def test_the_served_loop_calls_the_job_links_in_c():
    """A job link's read and the turn's job messages are C hooks of the served loop
    (disque/_fast/loophooks.pyx); other polled fds keep plain callables, and a hook
    called from Python runs its C method."""
    from disque._fast.joblinkpath import InEvent, JobLinkPath
    from disque._fast.loophooks import FdHandler, MessagesOut
    assert issubclass(InEvent, FdHandler) and issubclass(JobLinkPath, MessagesOut)
    with pytest.raises(NotImplementedError):
        FdHandler()(1)          # the base has no handler of its own
    pxd = (FAST / "servedloop.pxd").read_text()
    assert "cdef public MessagesOut job_links_out" in pxd
    assert "cdef public PeerLinks peers" in pxd
