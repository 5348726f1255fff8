"""The server's bytecode, written once before the suite starts its nodes.

Every node the tests start is a new interpreter that imports about a hundred modules of
the package. With PYTHONDONTWRITEBYTECODE set in the environment (as on the machines this
suite runs on) no interpreter writes the bytecode cache, an editable install has none, and
each node would compile every module from source: about 0.17 s of CPU per start, on a suite
that starts over a thousand. compileall writes the cache explicitly (it is skipped for a
module whose cache is up to date), and the nodes read it."""
import compileall
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent.parent / "disque"


def compile_package():
    compileall.compile_dir(str(PACKAGE), quiet=1)
