from disque._fast.job cimport Job

cdef Py_ssize_t job_size(Job job, bint withcounters)
cdef char *put_job(char *p, Job job, bint withcounters)
cpdef bytes encode_job(Job job, bint withcounters)
cpdef bytes encode_jobs(list jobs, bint withcounters)
cpdef object encode_jobs_pieces(list jobs, bint withcounters)
