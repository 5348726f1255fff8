"""Worker processes a test starts (disque-worker, celery worker, dramatiq): each in a
session of its own so its children go with it, its output in a log file, and what its jobs
did in a JSON-lines record file (`[event, value, time, pid, ...]` per line). Every process
tree is killed by PID (disque/harness/node.py, kill_tree) at the end, even when the test
fails."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from disque.harness.node import kill_tree


class WorkerProcesses:

    def __init__(self, directory, record_name="record.jsonl"):
        self.dir = Path(directory)
        self.record = self.dir / record_name
        self.procs = []

    def launch(self, argv, env=None, log_name=None):
        """Start `argv` in the directory, output to a log file of its own."""
        log_path = self.dir / (log_name or "worker%d.log" % len(self.procs))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, cwd=self.dir, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        proc.log_path = log_path
        self.procs.append(proc)
        return proc

    def log(self, proc):
        return Path(proc.log_path).read_bytes().decode("utf-8", "replace")

    def events(self, kind=None):
        """The record's rows, of one event kind or all."""
        if not self.record.exists():
            return []
        rows = [json.loads(line) for line in self.record.read_text().splitlines() if line]
        return [row for row in rows if kind is None or row[0] == kind]

    def reset_record(self):
        self.record.write_text("")

    def kill(self, proc):
        kill_tree(proc.pid)
        proc.wait(10)

    def kill_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)
