"""Queue slots as the server computes them (CRC16 mod 4096), to place queues on chosen workers."""
from __future__ import annotations



def crc16(data: bytes) -> int:
    """CRC16/XMODEM, the slot hash of README "Design" (an independent reference for tests)."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def queues_on_distinct_workers(prefix, per_worker=1, nworkers=3):
    """`per_worker` queue names owned by each worker of an `nworkers` node, worker by worker."""
    found = {w: [] for w in range(nworkers)}
    i = 0
    while any(len(v) < per_worker for v in found.values()):
        name = f"{prefix}-{i}"
        w = (crc16(name.encode()) % 4096) % nworkers
        if len(found[w]) < per_worker:
            found[w].append(name)
        i += 1
    return [q for w in range(nworkers) for q in found[w]]
