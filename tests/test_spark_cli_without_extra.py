"""`disque-stats-ingest` without the `spark` extra: one line naming the extra, exit code 2.

The installed console script runs in a subprocess whose interpreter cannot import pyspark:
a `sitecustomize` on PYTHONPATH puts a meta path finder first that refuses `pyspark`, which
is what a `pip install disque-py` without `[spark]` looks like to the script.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

BLOCKER = '''
import sys

class _NoPyspark:
    """Behave as if pyspark were not installed."""
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoPyspark())
'''


def _console_script() -> list[str]:
    exe = Path(sys.executable).with_name("disque-stats-ingest")
    if not exe.exists():
        pytest.skip("disque-stats-ingest console script not installed next to the interpreter")
    return [str(exe)]


def test_console_script_without_pyspark_says_what_to_install(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    probe = subprocess.run([sys.executable, "-c", "import pyspark"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr   # the blocker works
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "stats.jsonl").write_text("{}\n")
    p = subprocess.run(_console_script() + ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    assert "pip install 'disque-py[spark]'" in lines[0] and "spark extra" in lines[0]
    assert not (tmp_path / "out").exists()


def test_console_script_help_works_without_pyspark(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    p = subprocess.run(_console_script() + ["--help"], env=dict(os.environ, PYTHONPATH=str(tmp_path)),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "--input" in p.stdout and "Traceback" not in p.stderr
