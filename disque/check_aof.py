"""`disque-check-aof [--fix] FILE...`: report (and optionally repair) worker AOF files.

Exit status 0 when every file is valid, 1 otherwise. `--fix` truncates a file that ends
inside a record to its last complete record (asking first unless `--yes`); a file with
bad data in the middle cannot be fixed automatically: the report gives the byte offset.
"""
import argparse
import os
import sys
import time

from disque.contracts.aof_format import AofCorrupt, AofTruncated, read_records


def check(path):
    """(records, status, detail): status is 'ok', 'truncated' or 'corrupt'."""
    count = 0
    try:
        for _ in read_records(path):
            count += 1
    except AofTruncated as e:
        return count, "truncated", e
    except AofCorrupt as e:
        return count, "corrupt", e
    return count, "ok", None


def main(argv=None):
    ap = argparse.ArgumentParser(prog="disque-check-aof", description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--fix", action="store_true", help="truncate a truncated tail")
    ap.add_argument("--yes", action="store_true", help="do not ask before fixing")
    args = ap.parse_args(argv)
    bad = 0
    for path in args.files:
        try:
            count, status, detail = check(path)
        except OSError as e:
            print("%s: cannot read: %s" % (path, e.strerror))
            bad += 1
            continue
        if status == "ok":
            print("%s: OK, %d records, %d bytes" % (path, count, os.path.getsize(path)))
            continue
        print("%s: %s after %d valid records: %s" % (path, status.upper(), count, detail))
        if status == "truncated" and args.fix:
            if not args.yes:
                answer = input("Truncate %s to %d bytes? [y/N] " % (path, detail.valid_up_to))
                if answer.strip().lower() not in ("y", "yes"):
                    bad += 1
                    continue
            backup = "%s.bak-%d" % (path, int(time.time()))
            with open(path, "rb") as src, open(backup, "wb") as dst:
                dst.write(src.read())
            os.truncate(path, detail.valid_up_to)
            print("%s: truncated to %d bytes (backup in %s)" % (path, detail.valid_up_to, backup))
            continue
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
