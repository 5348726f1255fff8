# cython: language_level=3
"""One pwrite at a time on a thread of its own that never takes the GIL (the spill log's
appends, disque/workers/spill_log.py): a spilling worker handed its O_DIRECT writes to a
Python thread, which waited for the GIL the serving loop held (0.4-0.8 ms) before its
write could start, so every next batch waited for the last one; here the write starts at
once and the loop only waits when it needs the bytes on disk."""
from libc.errno cimport errno, EINTR
from libc.stdlib cimport calloc, free
from posix.types cimport off_t
from posix.unistd cimport getpid, pwrite


cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_create(pthread_t *thread, const void *attr,
                       void *(*start)(void *) noexcept nogil, void *arg)
    int pthread_join(pthread_t thread, void **retval)
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *m)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_cond_init(pthread_cond_t *c, const void *attr)
    int pthread_cond_destroy(pthread_cond_t *c)
    int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
    int pthread_cond_broadcast(pthread_cond_t *c)


DEF WRITE_NONE = 0
DEF WRITE_PENDING = 1
DEF WRITE_DONE = 2
DEF WRITER_STOP = 3


cdef struct Shared:
    pthread_mutex_t lock
    pthread_cond_t cond
    int state
    int fd
    const char *buf
    size_t length
    off_t offset
    size_t written
    int err


cdef void *run(void *arg) noexcept nogil:
    cdef Shared *s = <Shared *>arg
    cdef size_t done
    cdef ssize_t n
    cdef int err
    pthread_mutex_lock(&s.lock)
    while True:
        while s.state != WRITE_PENDING and s.state != WRITER_STOP:
            pthread_cond_wait(&s.cond, &s.lock)
        if s.state == WRITER_STOP:
            break
        pthread_mutex_unlock(&s.lock)
        done = 0
        err = 0
        while done < s.length:
            n = pwrite(s.fd, s.buf + done, s.length - done, s.offset + <off_t>done)
            if n < 0:
                if errno == EINTR:
                    continue
                err = errno
                break
            if n == 0:
                err = 5             # EIO: a device that takes nothing
                break
            done += <size_t>n
        pthread_mutex_lock(&s.lock)
        s.written = done
        s.err = err
        s.state = WRITE_DONE
        pthread_cond_broadcast(&s.cond)
    pthread_mutex_unlock(&s.lock)
    return NULL


cdef class BackgroundWriter:
    """`submit` a buffer's bytes to a file descriptor at an offset; `wait` for the
    result. One write at a time: the buffer is kept (and must not change) until `wait`."""
    cdef Shared *s
    cdef pthread_t thread
    cdef int owner_pid          # a forked child never joins its parent's thread
    cdef object held            # the buffer being written
    cdef const unsigned char[:] view

    def __cinit__(self):
        self.s = <Shared *>calloc(1, sizeof(Shared))
        if self.s == NULL:
            raise MemoryError()
        pthread_mutex_init(&self.s.lock, NULL)
        pthread_cond_init(&self.s.cond, NULL)
        if pthread_create(&self.thread, NULL, run, self.s) != 0:
            pthread_cond_destroy(&self.s.cond)
            pthread_mutex_destroy(&self.s.lock)
            free(self.s)
            self.s = NULL
            raise OSError("can't start the spill writer thread")
        self.owner_pid = getpid()

    def submit(self, int fd, buffer, size_t length, off_t offset):
        """Start writing buffer[:length] at `offset` of `fd`."""
        if self.s == NULL:
            raise ValueError("writer closed")
        cdef const unsigned char[:] view = buffer
        if length > <size_t>view.shape[0] or length == 0:
            raise ValueError("bad length")
        if self.busy():
            raise RuntimeError("a write is already in flight")
        self.held = buffer
        self.view = view
        with nogil:
            pthread_mutex_lock(&self.s.lock)
            self.s.fd = fd
            self.s.buf = <const char *>&view[0]
            self.s.length = length
            self.s.offset = offset
            self.s.state = WRITE_PENDING
            pthread_cond_broadcast(&self.s.cond)
            pthread_mutex_unlock(&self.s.lock)

    def busy(self):
        """A write is in flight and not done yet."""
        if self.s == NULL:
            return False
        cdef int state
        with nogil:
            pthread_mutex_lock(&self.s.lock)
            state = self.s.state
            pthread_mutex_unlock(&self.s.lock)
        return state == WRITE_PENDING

    def wait(self):
        """The write in flight, done: (bytes written, errno or 0); (0, 0) with none."""
        if self.s == NULL:
            return 0, 0
        cdef size_t written = 0
        cdef int err = 0, state
        with nogil:
            pthread_mutex_lock(&self.s.lock)
            while self.s.state == WRITE_PENDING:
                pthread_cond_wait(&self.s.cond, &self.s.lock)
            state = self.s.state
            if state == WRITE_DONE:
                written = self.s.written
                err = self.s.err
                self.s.state = WRITE_NONE
            pthread_mutex_unlock(&self.s.lock)
        self.view = None
        self.held = None
        return written, err

    def close(self):
        """Wait for the write in flight and end the thread."""
        self.stop()
        self.view = None
        self.held = None

    def __dealloc__(self):
        self.stop()

    cdef void stop(self) noexcept:
        """Let the write in flight end, then the thread (in the process that started it: a
        forked child has no such thread to join)."""
        if self.s == NULL:
            return
        if getpid() == self.owner_pid:
            with nogil:
                pthread_mutex_lock(&self.s.lock)
                while self.s.state == WRITE_PENDING:
                    pthread_cond_wait(&self.s.cond, &self.s.lock)
                self.s.state = WRITER_STOP
                pthread_cond_broadcast(&self.s.cond)
                pthread_mutex_unlock(&self.s.lock)
                pthread_join(self.thread, NULL)
            pthread_cond_destroy(&self.s.cond)
            pthread_mutex_destroy(&self.s.lock)
            free(self.s)
        self.s = NULL
