/* A per-process wall-clock offset for the fault harness (docs/faults-clocks.md).

   LD_PRELOAD'ed into a node (its workers inherit it), this adds an offset to what
   CLOCK_REALTIME reads: clock_gettime(CLOCK_REALTIME[_COARSE]), gettimeofday() and
   time(). Every other clock, CLOCK_MONOTONIC above all, is left alone: that is what an
   NTP step does to a real machine. The offset (signed 64-bit nanoseconds, native
   endianness) is the first 8 bytes of the file named by DQF_WALLCLOCK_FILE, mapped
   shared, so the harness moves the clock by rewriting the file and the process sees
   it at its next read, with no system call per read. No file, or a short one: offset 0.

   Why not libfaketime: Debian's 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC=1 makes every
   clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) fail with EINVAL, which is Python's
   time.sleep() and subprocess's wait(timeout); without that variable it fakes the
   monotonic clock too. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *offset_ns;
static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int mapped;

static void map_offset(void)
{
    const char *path = getenv("DQF_WALLCLOCK_FILE");
    mapped = 1;
    if (!path)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size >= 8) {
        void *p = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED)
            offset_ns = p;
    }
    close(fd);
}

static int64_t offset(void)
{
    if (!mapped)
        map_offset();
    return offset_ns ? *offset_ns : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    if (!real_clock_gettime)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int r = real_clock_gettime(id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset();
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
    }
    return r;
}

int gettimeofday(struct timeval *tv, void *tz)
{
    struct timespec ts;
    if (tz)
        ((struct timezone *)tz)->tz_minuteswest = ((struct timezone *)tz)->tz_dsttime = 0;
    if (tv) {
        clock_gettime(CLOCK_REALTIME, &ts);
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return 0;
}

time_t time(time_t *t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t)
        *t = ts.tv_sec;
    return ts.tv_sec;
}
