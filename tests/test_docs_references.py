"""The code cites the documents in docs/; every citation must lead somewhere that exists.

- "SPEC n" / "SPEC n.m" anywhere in the sources names a numbered section of docs/spec.md;
- "docs/<name>.md" (with an optional #anchor) names a file (and heading) that exists;
- a relative link between documents, "(<name>.md#anchor)", resolves the same way.

A renamed or renumbered section fails here instead of leaving a dangling reference.
"""
import pathlib
import re

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SOURCE_DIRS = ("disque", "bench", "spark", "faults", "tests")
SOURCE_SUFFIXES = (".py", ".pyx", ".pxd", ".html", ".sh")

SPEC_CITE = re.compile(r"SPEC (\d+(?:\.\d+)*)")
DOC_CITE = re.compile(r"docs/([A-Za-z0-9_-]+\.md)(?:#([A-Za-z0-9_-]+))?")
DOC_LINK = re.compile(r"\]\((?:\./)?([A-Za-z0-9_-]+\.md)(?:#([A-Za-z0-9_-]+))?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)


def source_files():
    for top in SOURCE_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in SOURCE_SUFFIXES and path.is_file():
                yield path
    yield ROOT / "README.md"


def github_slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to dashes."""
    slug = heading.strip().lower()
    slug = re.sub(r"[^\w\- ]", "", slug)
    return slug.replace(" ", "-")


def anchors_of(doc_name):
    text = (DOCS / doc_name).read_text()
    return {github_slug(h) for h in HEADING.findall(text)}


def spec_sections():
    """Numbered headings, plus "n.k" for item k of a section that says its list items are
    cited that way (section 16, "Easy to get wrong")."""
    text = (DOCS / "spec.md").read_text()
    numbers = set()
    headings = list(re.finditer(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s.*$", text, re.M))
    for i, match in enumerate(headings):
        number = match.group(1)
        numbers.add(number)
        body_end = headings[i + 1].start() if i + 1 < len(headings) else len(text)
        body = text[match.end():body_end]
        if f"cited as SPEC {number}.n" in body:
            numbers.update(f"{number}.{k}" for k in re.findall(r"^(\d+)\. ", body, re.M))
    return numbers


def test_github_slug_matches_github_rules():
    assert github_slug("6.2 States") == "62-states"
    assert github_slug("The job state machine") == "the-job-state-machine"
    assert github_slug("Why `used_memory` counts (data)") == "why-used_memory-counts-data"


def test_spec_has_numbered_sections():
    sections = spec_sections()
    assert {"1.3", "3.1", "7.2", "10.3", "12", "16.1", "16.15"} <= sections
    assert "16.99" not in sections


def test_every_spec_citation_names_a_section_of_docs_spec():
    sections = spec_sections()
    dangling = []
    for path in source_files():
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for number in SPEC_CITE.findall(line):
                if number not in sections:
                    dangling.append(f"{path.relative_to(ROOT)}:{lineno}: SPEC {number}")
    assert not dangling, "no such section in docs/spec.md:\n" + "\n".join(dangling)


def check_target(where, name, anchor, dangling):
    if not (DOCS / name).is_file():
        dangling.append(f"{where}: docs/{name} does not exist")
    elif anchor and anchor not in anchors_of(name):
        dangling.append(f"{where}: docs/{name} has no heading #{anchor}")


def test_every_docs_path_in_the_sources_exists():
    dangling = []
    for path in source_files():
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for name, anchor in DOC_CITE.findall(line):
                check_target(f"{path.relative_to(ROOT)}:{lineno}", name, anchor, dangling)
    assert not dangling, "\n".join(dangling)


def test_every_link_between_documents_resolves():
    dangling = []
    for doc in sorted(DOCS.glob("*.md")):
        for lineno, line in enumerate(doc.read_text().splitlines(), 1):
            for name, anchor in DOC_LINK.findall(line):
                check_target(f"docs/{doc.name}:{lineno}", name, anchor, dangling)
    assert not dangling, "\n".join(dangling)
