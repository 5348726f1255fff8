"""The original's own Tcl cluster suite (`tests/cluster` of antirez/disque) run against our
server, with its default configuration: the suite's configuration files go to our
`disque-server` unchanged, with `--workers N` added.

It needs a checkout of the original's sources (not built: only its `tests/` are used) and
`tclsh`. The suite is copied to a temporary directory, where `src/disque-server` is a
two-line script that starts our server; nothing is written into the checkout.

    python tools/upstream_suite.py --disque-source /path/to/disque            # every unit
    python tools/upstream_suite.py --disque-source /path/to/disque --units 02,07 --runs 3

Each run prints the suite's own lines as they come, then one summary line per run: tests
passed, the first failure (the suite stops at it) and the time. The exit status is 0 only
when every run passed every test.
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

OK_LINE = re.compile(r"^\d\d:\d\d:\d\d> (.*): .*OK")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


BASE_PORT = 21000       # + 10000 for the buses: below 32768, the ephemeral range


def our_server():
    """The disque-server next to this interpreter (the README's venv), else `python -m disque`."""
    script = os.path.join(os.path.dirname(sys.executable), "disque-server")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "disque"]


def prepare(source, workers, extra):
    """A copy of the suite whose src/disque-server starts our server; returns its root."""
    root = tempfile.mkdtemp(prefix="disque-upstream-")
    shutil.copytree(os.path.join(source, "tests"), os.path.join(root, "tests"))
    # the suite's nodes listen from port 25000 and their buses 10000 higher, inside the
    # kernel's ephemeral range (32768-60999): a restarted node could find its bus port
    # taken by some connection's local end ("Address already in use"). Our copy starts at
    # BASE_PORT, buses included below the range; the tests themselves are unchanged.
    harness = os.path.join(root, "tests", "instances.tcl")
    with open(harness) as f:
        text = f.read()
    if "set ::disque_base_port 25000" not in text:
        raise SystemExit("%s: no 'set ::disque_base_port 25000' to move below the "
                         "ephemeral range" % harness)
    with open(harness, "w") as f:
        f.write(text.replace("set ::disque_base_port 25000",
                             "set ::disque_base_port %d" % BASE_PORT))
    os.makedirs(os.path.join(root, "tests", "cluster", "tmp"), exist_ok=True)
    os.makedirs(os.path.join(root, "src"))
    wrapper = os.path.join(root, "src", "disque-server")
    argv = " ".join(map(shlex.quote, our_server()))
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nexec %s "$@" --workers %d %s\n'
                % (argv, workers, " ".join(map(shlex.quote, extra))))
    os.chmod(wrapper, 0o755)
    return root


def run_once(root, units, timeout):
    """One run of the suite, or of each unit in turn (the suite's --single takes one
    pattern): (tests passed, first failure or None, seconds)."""
    if not units:
        return run_suite(root, [], timeout)
    passed, failure, secs = 0, None, 0.0
    for unit in units:
        p, f, t = run_suite(root, ["--single", unit], timeout)
        passed += p
        secs += t
        failure = failure or f
    return passed, failure, secs


def run_suite(root, args, timeout):
    args = ["tclsh", "tests/cluster/run.tcl"] + args
    start = time.monotonic()
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True)
    passed, failure = 0, None
    try:
        deadline = start + timeout
        for line in proc.stdout:
            line = ANSI.sub("", line.rstrip("\n"))
            print(line, flush=True)
            if OK_LINE.match(line):
                passed += 1
            elif failure is None and re.match(r"^\d\d:\d\d:\d\d> ", line):
                failure = line
            if time.monotonic() > deadline:
                failure = failure or "timed out after %d s" % timeout
                break
        proc.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        failure = failure or "timed out after %d s" % timeout
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    if proc.returncode and failure is None:
        failure = "tclsh exited with %d" % proc.returncode
    return passed, failure, time.monotonic() - start


def unit_files(source, units):
    """The suite's file names for unit prefixes such as 02 (all of them when none given)."""
    names = sorted(os.listdir(os.path.join(source, "tests", "cluster", "tests")))
    names = [n for n in names if n.endswith(".tcl")]
    if not units:
        return []
    out = []
    for u in units:
        match = [n for n in names if n.startswith(u)]
        if not match:
            raise SystemExit("no unit %r in %s" % (u, names))
        out += match
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--disque-source", required=True,
                    help="a checkout of antirez/disque (its tests/ are used)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--units", default="", help="comma-separated unit prefixes, e.g. 02,07")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    ap.add_argument("--keep", action="store_true", help="keep the suite's copy (logs)")
    ap.add_argument("extra", nargs="*", help="directives added to every node, e.g. --spill no")
    opts = ap.parse_args()
    if shutil.which("tclsh") is None:
        raise SystemExit("tclsh not found: apt-get install tcl")
    units = unit_files(opts.disque_source, [u for u in opts.units.split(",") if u])
    root = prepare(opts.disque_source, opts.workers, opts.extra)
    results = []
    try:
        for i in range(opts.runs):
            passed, failure, secs = run_once(root, units, opts.timeout)
            results.append((passed, failure, secs))
            print("== run %d/%d: %d tests passed, %s, %.0f s" % (
                i + 1, opts.runs, passed, "no failure" if failure is None else
                "failed at: " + failure, secs), flush=True)
    finally:
        if opts.keep:
            print("suite copy kept in", root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print("== summary (%s, --workers %d%s): %s" % (
        ",".join(units) or "every unit", opts.workers,
        (" " + " ".join(opts.extra)) if opts.extra else "",
        "; ".join("%d passed%s" % (p, "" if f is None else " then FAILED") for p, f, _ in results)))
    return 0 if all(f is None for _, f, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
