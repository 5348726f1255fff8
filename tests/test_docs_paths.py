"""Every file of the repository that docs/ and the README name exists (docs/design.md walks
commands through files and functions: a moved or renamed file must take its mentions along)."""
import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATH = re.compile(r"(?<![\w./-])((?:disque|tests|bench|faults|spark|docs|tools|\.ci)/[\w./*-]*[\w*])")


def named_paths(text):
    """Repository paths in a document: `disque/frontend/getjob.py`, `tests/support/`, ...
    A glob (`tests/test_cluster*.py`) or a placeholder (`<original>/src`) is not a path."""
    return {m for m in PATH.findall(text) if not any(ch in m for ch in "*<>{}")}


def documents():
    return sorted(ROOT.glob("docs/*.md")) + [ROOT / "README.md"]


def test_the_scan_finds_paths():
    found = named_paths("see `disque/_fast/dispatch.pyx` and tests/support/ (docs/design.md).")
    assert found == {"disque/_fast/dispatch.pyx", "tests/support", "docs/design.md"}


@pytest.mark.parametrize("doc", documents(), ids=lambda p: p.name)
def test_every_path_a_document_names_exists(doc):
    missing = sorted(p for p in named_paths(doc.read_text()) if not (ROOT / p).exists())
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"
