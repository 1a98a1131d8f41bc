#!/usr/bin/env python3
"""What one write plus fdatasync costs, appending to a file against
overwriting blocks already written inside it: the measurement behind the
zero-filled space ahead of the engine's active segment and of the name log
(crates/strata-engine/src/writer.rs and crates/strata-names/src/embedded.rs,
ZERO_STEP). On ext4 an append grows the file, so its fdatasync commits the
journal too.

    python3 scripts/fsync-cost.py [DIR]
"""
import os, sys, time

def bench(path, prep, n, size):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    if prep == "over zeros":
        os.write(fd, b"\0" * (n * size))
        os.fsync(fd)
    elif prep == "fallocated":
        os.posix_fallocate(fd, 0, n * size)
        os.fsync(fd)
    buf = os.urandom(size)
    t = time.time()
    for i in range(n):
        os.pwrite(fd, buf, i * size)
        os.fdatasync(fd)
    us = (time.time() - t) / n * 1e6
    os.close(fd)
    os.unlink(path)
    return us

def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    path = os.path.join(d, "fsync-cost.tmp")
    print(f"{'write + fdatasync':<20} {'appending':>10} {'fallocated':>11} {'over zeros':>11}")
    for size, n in ((4096, 300), (1 << 20, 100)):
        r = [bench(path, p, n, size) for p in ("appending", "fallocated", "over zeros")]
        print(f"{str(size) + ' B':<20} {r[0]:8.0f}us {r[1]:9.0f}us {r[2]:9.0f}us")

if __name__ == "__main__":
    main()
