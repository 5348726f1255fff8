"""Build script: compiles the Cython hot path in disque/_fast/ during a normal `pip install`."""
from Cython.Build import cythonize
from setuptools import Extension, setup

FAST_MODULES = ["resp", "jobid", "skiplist", "timers", "job", "frontcore", "shardcore", "peerlinks", "servedcore", "clock", "codec", "busrelay", "replcore", "linkio"]

extensions = [
    Extension(f"disque._fast.{name}", [f"disque/_fast/{name}.pyx"], extra_compile_args=["-O2"])
    for name in FAST_MODULES
]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True},
    ),
)
