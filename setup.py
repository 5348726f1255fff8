"""Build script: compiles the Cython hot path in disque/_fast/ during a normal `pip install`."""
import pathlib

from Cython.Build import cythonize
from setuptools import Extension, setup

# every .pyx of disque/_fast is one extension module: a new module needs no entry here
FAST_MODULES = sorted(p.stem for p in pathlib.Path("disque/_fast").glob("*.pyx"))

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
