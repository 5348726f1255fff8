"""A forked worker's adoption (disque/worker_spawn.py, docs/design.md "Starting the
workers"): it waits until the starter that forked it has exited and the front-end, the
subreaper, is its parent; it must not wait when that is already so, and must say False
when its parent is not the front-end by the deadline.

Each case runs in a child interpreter, which makes itself a subreaper as the front-end
does: the test process itself adopts nothing."""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

SCENARIO = textwrap.dedent("""
    import os, sys, time
    from disque._fast import procctl
    from disque.worker_spawn import wait_for_adoption
    mode = sys.argv[1]
    procctl.become_subreaper()
    front_end = os.getpid()
    result_r, result_w = os.pipe()
    go_r, go_w = os.pipe()
    starter = os.fork()
    if starter == 0:                            # the starter: forks a worker, then exits
        starter = os.getpid()
        worker = os.fork()
        if worker == 0:
            os.close(go_r)
            if mode == "starter gone":
                os.close(go_w)                  # the starter may exit at once
                while os.getppid() != front_end:
                    os.read(result_r, 0)
            else:
                os.write(go_w, b"x")            # waiting from now on: the starter exits
                os.close(go_w)
            t0 = time.monotonic()
            ok = wait_for_adoption(starter, front_end if mode != "another parent" else -1,
                                   timeout=5)
            os.write(result_w, b"%d %.3f" % (ok, time.monotonic() - t0))
            os._exit(0)
        os.close(go_w)
        os.read(go_r, 1)                        # "starter gone": EOF once the worker closed it
        os._exit(0)
    os.close(go_w)
    os.close(go_r)
    os.waitpid(starter, 0)
    os.close(result_w)
    ok, took = os.read(result_r, 64).split()
    os.wait()                                   # the adopted worker
    print(ok.decode(), took.decode())
""")


def adoption(mode):
    out = subprocess.run([sys.executable, "-c", SCENARIO, mode], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ok, took = out.stdout.split()
    return ok == "1", float(took)


@pytest.mark.parametrize("mode", ["starter alive", "starter gone"])
def test_a_worker_is_adopted_once_its_starter_exits_and_waits_no_longer(mode):
    """With the starter still there, the wait ends when it exits (its pidfd); with the
    starter gone before the worker looks, at once: the worker's parent is then the front
    end, whose pidfd it must not wait on (it did, for the whole timeout)."""
    ok, took = adoption(mode)
    assert ok
    assert took < 4.0


def test_a_worker_whose_parent_is_not_the_front_end_says_so():
    """The front-end died (here: a front-end pid that is no process's): False, once the
    starter has exited, not at the deadline."""
    ok, took = adoption("another parent")
    assert not ok
    assert took < 4.0
