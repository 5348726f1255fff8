"""The one splitter of <u32 length, little endian><payload> frames (disque/_fast/frames.pyx),
for the Cython links that read frames in C (peer links, direct job links)."""

cdef enum:
    FRAMES_READ_SIZE = 262144   # the most one read takes (every read lands in one C buffer)
    FRAMES_AGAIN = -1           # nothing to read now
    FRAMES_TOO_LONG = -2        # a frame above its limit: the caller closes that link

cdef Py_ssize_t split_frames(const unsigned char *base, Py_ssize_t size, Py_ssize_t first_limit,
                             Py_ssize_t limit, list frames) except -3
cdef Py_ssize_t split_more(bytearray pending, const char *data, Py_ssize_t n,
                           Py_ssize_t first_limit, Py_ssize_t limit, list frames) except -3
cdef Py_ssize_t recv_frames(int fd, bytearray pending, Py_ssize_t first_limit, Py_ssize_t limit,
                            list frames, int flags) except -3
