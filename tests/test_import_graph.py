"""No import circles in the tree (docs/design.md): between the Python modules of disque/,
faults/, tools/ and bench/ (an import anywhere in a module, a function's included: an import
put inside a function to dodge a circle still counts), between the Cython modules'
cimports and imports, and between the operations console's ES modules."""
import ast
import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("disque", "faults")


def module_of(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_modules():
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            out[module_of(path)] = path
    return out


def imported(path, modules):
    """The project modules `path` imports anywhere in it (its package's own included)."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_of(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names = [base] + ["%s.%s" % (base, a.name) for a in node.names]
        for name in names:
            if name in modules and name != me:
                found.add(name)
    return found


def cycles(graph):
    """Every strongly connected component of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_python_import_circle():
    modules = python_modules()
    graph = {name: imported(path, modules) for name, path in modules.items()}
    # a package's __init__ importing its own modules is no circle
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert cycles(graph) == []


CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+disque\._fast\.(\w+)\s+c?import|c?import\s+disque\._fast\.(\w+))",
                           re.M)


def test_no_cython_import_circle():
    fast = ROOT / "disque" / "_fast"
    graph = {}
    for path in list(fast.glob("*.pyx")) + list(fast.glob("*.pxd")):
        deps = {a or b for a, b in CYTHON_IMPORT.findall(path.read_text())}
        graph.setdefault(path.stem, set()).update(deps - {path.stem})
    assert cycles(graph) == []


JS_IMPORT = re.compile(r'^\s*import\s+[^;]*?from\s+"\./([\w-]+)\.js"', re.M)


def test_no_console_module_circle():
    js = ROOT / "disque" / "metrics"
    graph = {p.stem: set(JS_IMPORT.findall(p.read_text())) for p in js.glob("*.js")}
    assert graph, "no ES modules found"
    assert cycles(graph) == []
