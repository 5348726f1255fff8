"""One writer per job state (docs/design.md, "The job state machine").

Job.state changes only through the named transitions of disque/_fast/job.pyx
(mark_wait_repl, mark_active, mark_queued, mark_acked, and restore_state for a decoded
job). Any other assignment to `.state` of a job in the sources fails here.
"""
import pathlib
import re

import pytest

from disque._fast.job import (ACKED, ACTIVE, QUEUED, WAIT_REPL, Job, mark_acked, mark_active,
                              mark_queued, mark_wait_repl, restore_state)

pytestmark = pytest.mark.unit

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "disque"
TRANSITIONS = PACKAGE / "_fast" / "job.pyx"
ASSIGNMENT = re.compile(r"\bjob\w*\.state\s*=[^=]|\bj\.state\s*=[^=]")


def state_assignments(text):
    return [line.strip() for line in text.splitlines() if ASSIGNMENT.search(line)]


def test_the_scan_recognises_an_assignment():
    assert state_assignments("        job.state = JOB_ACTIVE\n")
    assert not state_assignments("        if job.state == JOB_ACTIVE:\n")


def test_only_the_transitions_assign_a_job_state():
    offenders = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix not in (".py", ".pyx") or path == TRANSITIONS:
            continue
        for line in state_assignments(path.read_text()):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}: {line}")
    assert not offenders, "use the transitions of disque/_fast/job.pyx:\n" + "\n".join(offenders)


def test_the_transitions_set_their_state():
    job = Job(b"D-" + b"a" * 38, b"q", b"body")
    for transition, state in ((mark_wait_repl, WAIT_REPL), (mark_active, ACTIVE),
                              (mark_queued, QUEUED), (mark_acked, ACKED)):
        transition(job)
        assert job.state == state
    restore_state(job, QUEUED)
    assert job.state == QUEUED
