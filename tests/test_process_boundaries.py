"""The processes meet only through their contracts (docs/design.md, "Contracts between processes").

A worker (disque/workers/) never imports front-end or bus code, and the front-end never
imports a worker's internals: what both sides must agree on lives in disque/contracts/
(link messages and framing, bus message types, the job codec, the AOF format). The one
exception is the link transport itself, disque/workers/link.py (with its ZeroMQ variant,
zmq_link.py, and what both share, link_base.py), whose two ends (front-end and worker side) are one concern
kept together, and the worker's entry point, which
disque/worker_spawn.py imports to fork a worker from the front-end at start-up.
"""
import ast
import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "disque"

# what a worker process may import from the project
WORKER_ALLOWED = ("disque.workers", "disque.contracts", "disque._fast", "disque.commands",
                  "disque.replies", "disque.log", "disque.config", "disque.memstat",
                  "disque.heap_trim", "disque.stats_collect", "disque.statslog",
                  "disque.nodeclock", "disque.deadlines")
# the front-end may use the link transport, nothing else of the workers
FRONT_ALLOWED_FROM_WORKERS = ("disque.workers.link",)
# ... and the spawner the worker's entry point (its `serve`), to fork a worker
ENTRY_POINT_IMPORTS = {"disque/worker_spawn.py": "disque.workers.process"}


def module_name(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_imports(path):
    """Every disque.* module `path` imports (absolute or relative), at any depth."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" \
        else module_name(path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("disque"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("disque"):
                found.add(mod)
                # `from disque.workers import protocol` imports disque.workers.protocol
                found.update(f"{mod}.{a.name}" for a in node.names)
    return found


def sources(under):
    return sorted(p for p in under.rglob("*.py") if p.is_file())


def imports_module(imported, prefix):
    return imported == prefix or imported.startswith(prefix + ".")


def is_real_module(name):
    if name == "disque":
        return False            # `from disque import x`: x itself is checked
    rel = pathlib.Path(*name.split("."))
    return (ROOT / rel).with_suffix(".py").is_file() or (ROOT / rel / "__init__.py").is_file() \
        or any((ROOT / rel.parent).glob(rel.name + ".*.so")) or (ROOT / rel).with_suffix(".pyx").is_file()


def test_the_import_scan_sees_imports():
    found = project_imports(PACKAGE / "workers" / "link.py")
    assert "disque.contracts.worker_link" in found


def test_workers_import_only_contracts_and_shared_pieces():
    wrong = []
    for path in sources(PACKAGE / "workers"):
        for name in project_imports(path):
            if not is_real_module(name):
                continue            # a name imported from a module, not a module
            if not any(imports_module(name, ok) for ok in WORKER_ALLOWED):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_front_end_does_not_import_worker_internals():
    wrong = []
    for path in sources(PACKAGE):
        if (PACKAGE / "workers") in path.parents:
            continue
        for name in project_imports(path):
            rel = str(path.relative_to(ROOT))
            if imports_module(name, "disque.workers") and name != "disque.workers" \
                    and is_real_module(name) and ENTRY_POINT_IMPORTS.get(rel) != name \
                    and not any(imports_module(name, ok) for ok in FRONT_ALLOWED_FROM_WORKERS):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_cython_cores_read_bus_numbers_from_the_contract():
    assert is_real_module("disque.contracts.bus_messages")     # the rule names a real module
    scanned = 0
    for pyx in sorted((PACKAGE / "_fast").glob("*.pyx")):
        found = re.findall(r"^\s*(?:from|import|cimport)\s+(disque\.[\w.]+)", pyx.read_text(), re.M)
        scanned += len(found)
        wrong = [name for name in found if imports_module(name, "disque.bus")]
        assert not wrong, f"{pyx.name} imports {wrong}: bus numbers come from disque.contracts"
    assert scanned > 20, "the scan finds the cores' imports"


def test_the_cython_cores_take_contract_numbers_from_the_contracts():
    """A number of the link or the bus written again by hand in a .pyx could drift from its
    contract: every such constant must be read from disque/contracts/ at import."""
    from disque.contracts import bus_messages, worker_link
    contract_names = {n for n, v in vars(worker_link).items() if n.isupper() and type(v) is int}
    contract_names |= {n for n, v in vars(bus_messages).items() if n.isupper() and type(v) is int}
    assignment = re.compile(r"^\s*(?:DEF|cdef\s+\w+)\s+(\w+)\s*=\s*(.+)$", re.M)
    hand_written = []
    for pyx in sorted((PACKAGE / "_fast").glob("*.pyx")):
        for name, value in assignment.findall(pyx.read_text()):
            bare = name[4:] if name.startswith(("BUS_", "REQ_")) else name
            if (name in contract_names or bare in contract_names) \
                    and not re.match(r"_(link|bus)\.\w+", value.strip()):
                hand_written.append(f"{pyx.name}: {name} = {value.strip()}")
    assert not hand_written, "\n".join(hand_written)
    for pyx in ("frontcore.pyx", "shardcore.pyx"):
        text = (PACKAGE / "_fast" / pyx).read_text()
        assert not re.search(r"rep\[0\] == -\d", text), pyx


def test_the_client_uses_only_the_public_protocol():
    """disque.client (and the framework brokers on it) import nothing of the server: they
    speak the protocol, so they work against any Disque (docs/client.md)."""
    wrong = []
    for under in ("client", "integrations"):
        for path in sources(PACKAGE / under):
            for name in project_imports(path):
                if is_real_module(name) and not any(imports_module(name, ok) for ok in (
                        "disque.client", "disque.integrations")):
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_harness_imports_nothing_of_the_server():
    """disque.harness starts nodes from outside (tests, bench/, faults/): it imports only
    itself, the standard library, psutil, redis-py and cryptography (the TLS tests'
    certificates, disque/harness/certs.py)."""
    import sys
    wrong = []
    for path in sources(PACKAGE / "harness"):
        for name in project_imports(path):
            if is_real_module(name) and not imports_module(name, "disque.harness"):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and not node.level else []
            for top in {n.split(".")[0] for n in names}:
                if top not in sys.stdlib_module_names | {"disque", "psutil", "redis", "cryptography"}:
                    wrong.append(f"{path.relative_to(ROOT)} imports {top}")
    assert not wrong, "\n".join(wrong)


def test_no_cython_core_of_a_worker_imports_the_front_end_core():
    """The worker's Cython cores (servedcore, servedloop, shardcore, replcore ...) share the
    RESP helpers through resp.pyx, never through the front-end's core (frontcore.pyx)."""
    fast = PACKAGE / "_fast"
    pattern = re.compile(r"^\s*(from\s+disque\._fast\.frontcore\s+c?import|c?import\s+disque\._fast\.frontcore)",
                         re.M)
    wrong = [p.name for p in sorted(fast.glob("*.p[yx][dx]"))
             if not p.name.startswith("frontcore.") and pattern.search(p.read_text())]
    assert not wrong, wrong
