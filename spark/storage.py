"""Paths: listing the input, and deleting/checking output paths through Hadoop's FileSystem
(so local paths and cluster file systems such as hdfs:// behave the same)."""
from __future__ import annotations

import fnmatch
import glob
import os
from urllib.parse import urlparse

#: File names a directory input picks up (rotated files included: stats.jsonl.1, ...).
DIR_PATTERN = "*.jsonl*"
_GLOB_CHARS = set("*?[{")


def is_local(path: str) -> bool:
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def local_path(path: str) -> str:
    return urlparse(path).path if path.startswith("file:") else path


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts])


def _hidden(name: str) -> bool:
    return name.startswith(".") or name.startswith("_")


def list_input(path: str):
    """Resolve --input into (spark_paths, files, total_bytes).

    A local directory means every ``*.jsonl*`` file under it (recursively, hidden files
    and ``_``/``.``-prefixed names skipped, as Spark does); a local glob is expanded; a
    single file is itself. Non-local inputs (hdfs://, s3a://) are handed to Spark as they
    are and files/bytes are None.
    """
    if not is_local(path):
        return [path], None, None
    p = local_path(path)
    if "{" in p:  # Hadoop brace globs: let Spark expand them
        return [path], None, None
    if os.path.isdir(p):
        files = []
        for root, dirs, names in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not _hidden(d))
            for n in sorted(names):
                if not _hidden(n) and fnmatch.fnmatch(n, DIR_PATTERN):
                    files.append(os.path.join(root, n))
    elif any(c in p for c in _GLOB_CHARS):
        files = sorted(f for f in glob.glob(p, recursive=True)
                       if os.path.isfile(f) and not _hidden(os.path.basename(f)))
    elif os.path.isfile(p):
        files = [p]
    else:
        files = []
    files = [os.path.abspath(f) for f in files]
    total = sum(os.path.getsize(f) for f in files)
    return files, files, total


def _fs(spark, path: str):
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def exists(spark, path: str) -> bool:
    fs, hp = _fs(spark, path)
    return bool(fs.exists(hp))


def delete(spark, path: str) -> None:
    fs, hp = _fs(spark, path)
    if fs.exists(hp):
        fs.delete(hp, True)


def list_names(spark, path: str) -> list[str]:
    fs, hp = _fs(spark, path)
    if not fs.exists(hp):
        return []
    return sorted(st.getPath().getName() for st in fs.listStatus(hp))


def write_text(spark, path: str, text: str) -> None:
    fs, hp = _fs(spark, path)
    out = fs.create(hp, True)
    try:
        out.write(bytearray(text.encode("utf-8")))
    finally:
        out.close()


def read_text(spark, path: str) -> str | None:
    fs, hp = _fs(spark, path)
    if not fs.exists(hp):
        return None
    jvm = spark.sparkContext._jvm
    stream = fs.open(hp)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def copy_from_local(spark, local_dir: str, dest: str) -> None:
    fs, hp = _fs(spark, dest)
    jvm = spark.sparkContext._jvm
    fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path("file://" + os.path.abspath(local_dir)), hp)


def list_files(spark, path: str) -> set:
    """Every data file under ``path`` (recursively; not the hidden ``_``/``.`` ones), as URIs
    (a local directory is walked in Python: a Hadoop listing costs two JVM calls per file)."""
    if is_local(path):
        root = os.path.abspath(local_path(path))
        out = set()
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if not _hidden(x)]
            out.update("file:" + os.path.join(d, f) for f in files if not _hidden(f))
        return out
    fs, hp = _fs(spark, path)
    out = set()
    if not fs.exists(hp):
        return out
    it = fs.listFiles(hp, True)
    while it.hasNext():
        p = it.next().getPath()
        if not _hidden(p.getName()):
            out.add(p.toString())
    return out
