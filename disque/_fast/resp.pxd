cdef class RequestParser:
    cdef char *data             # bytes received: parsed up to pos, received up to size
    cdef Py_ssize_t size, cap, pos
    cdef Py_ssize_t last_read   # the last feed's length (KEEP_AFTER_READ)
    cdef long long mb_left     # bulk arguments still expected in the current multibulk
    cdef long long bulk_len    # length of the bulk being read, -1 while reading its header
    cdef list args
    cdef bytes big              # a big bulk argument being read into its object, or None
    cdef Py_ssize_t big_got     # ... and how much of it is in
    cdef int feed_raw(self, const char *data, Py_ssize_t n) except -1
    cdef void drop_buffer(self) noexcept
    cdef Py_ssize_t big_room(self) noexcept
    cdef char *big_end(self) noexcept
    cdef int start_big(self, char *base, Py_ssize_t size) except -1
    cpdef list commands(self)
    cdef list next_command(self)
    cdef list parse_inline(self, char *base, Py_ssize_t size)
    cdef list parse_multibulk_header(self, char *base, Py_ssize_t size)
    cdef list parse_bulks(self, char *base, Py_ssize_t size)

cpdef object parse_int(bytes s)
cpdef bytes status(bytes s)
cdef Py_ssize_t int_size(long long v) noexcept
cdef Py_ssize_t bulk_size(Py_ssize_t n) noexcept
cdef char *put_int(char *p, char kind, long long v) noexcept
cdef char *put_bulk(char *p, bytes b) noexcept
cdef bytes convert_nulls(bytes data)
cdef bytes to_resp3(bytes data)
