"""A FUSE pass-through file system whose fsync fails on demand (the fsync-fail scenario,
docs/faults-disks.md). This kernel has no device-mapper (no dm-flakey, no dm-error), but
it has /dev/fuse: every operation goes to a backing directory, except that fsync (and
fdatasync) of a file under /n<i>/ answers EIO while CONTROL/fail-fsync-n<i> exists.

    python -m faults.flakyfs BACKING MOUNTPOINT CONTROL     # runs until unmounted

Needs libfuse2 (Debian) and fusepy (PyPI), test-only dependencies."""
import errno
import os
import sys

from fuse import FUSE, FuseOSError, Operations


class Flaky(Operations):
    def __init__(self, root, control):
        self.root = root
        self.control = control
        self.fsync_failures = 0

    def real(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def failing(self, path):
        parts = path.lstrip("/").split("/", 1)
        return os.path.exists(os.path.join(self.control, "fail-fsync-" + parts[0]))

    # ---- the fault ----
    def fsync(self, path, datasync, fh):
        if self.failing(path):
            self.fsync_failures += 1
            raise FuseOSError(errno.EIO)
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)
        return 0

    def fsyncdir(self, path, datasync, fh):
        return 0

    # ---- pass-through ----
    def access(self, path, mode):
        if not os.access(self.real(path), mode):
            raise FuseOSError(errno.EACCES)

    def getattr(self, path, fh=None):
        st = os.lstat(self.real(path))
        return {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode",
                                            "st_mtime", "st_nlink", "st_size", "st_uid")}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self.real(path))

    def statfs(self, path):
        st = os.statvfs(self.real(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize",
                                            "f_favail", "f_ffree", "f_files", "f_flag",
                                            "f_frsize", "f_namemax")}

    def chmod(self, path, mode):
        os.chmod(self.real(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self.real(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self.real(path), times)

    def mkdir(self, path, mode):
        os.mkdir(self.real(path), mode)

    def rmdir(self, path):
        os.rmdir(self.real(path))

    def unlink(self, path):
        os.unlink(self.real(path))

    def rename(self, old, new):
        os.replace(self.real(old), self.real(new))

    def open(self, path, flags):
        return os.open(self.real(path), flags)

    def create(self, path, mode, fi=None):
        return os.open(self.real(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self.real(path), length)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)
        return 0


def main():
    backing, mountpoint, control = sys.argv[1:4]
    # pass-through of O_APPEND: the kernel turns it into writes at the end it tracks
    FUSE(Flaky(backing, control), mountpoint, foreground=True, nothreads=False,
         allow_other=True, default_permissions=True)


if __name__ == "__main__":
    main()
