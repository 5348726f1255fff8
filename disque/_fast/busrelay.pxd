"""The relay's per-message routing in C (disque/_fast/busrelay.pyx), for the Cython job
paths that call it directly (the direct job links)."""

cpdef route_job_messages(list msgs, bytes sender, int nworkers, dict inbox, int copies,
                         list gotjobs)
cpdef group_by_link(list entries, dict boxes, bytes myid, tuple everyone, list leftover)
