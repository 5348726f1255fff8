"""Disque, the distributed in-memory job queue, in Python with a Cython hot path."""
VERSION = "1.0-rc1"
__version__ = "0.1.0"
