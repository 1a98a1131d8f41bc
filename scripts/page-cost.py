#!/usr/bin/env python3
"""What writing through the page cache costs in system CPU, into fresh pages
and into pages just freed: the measurement behind the engine's write-cache
window (crates/strata-engine/src/cache.rs).

    python3 scripts/page-cost.py [DIR] [MiB]

Writes MiB (default 1024) to a file in DIR (default .), fdatasyncs it,
drops it from the page cache, then writes a second file of the same size
at once, so its pages are the ones just freed; then an O_DIRECT write for
the disk itself. On a VM whose free memory goes back to the host
(ballooning, free page reporting) the first write pays a host fault per
fresh page.
"""
import mmap, os, resource, sys, time

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_stime, r.ru_utime

def write(path, mib, buf, flags=0):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags)
    (s0, u0), t0 = cpu(), time.time()
    for _ in range(mib // 4):
        os.write(fd, buf)
    os.fdatasync(fd)
    (s1, u1), t1 = cpu(), time.time()
    return fd, s1 - s0, t1 - t0

def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    buf = mmap.mmap(-1, 4 << 20)  # page-aligned, so O_DIRECT accepts it
    buf.write(os.urandom(4 << 20))
    a, b, c = (os.path.join(d, f"page-cost-{x}") for x in "abc")
    try:
        print(f"{'write of ' + str(mib) + ' MiB':<34} {'sys s':>7} {'wall s':>7} {'MB/s':>7}")
        fd, s, w = write(a, mib, buf)
        print(f"{'buffered, fresh pages':<34} {s:7.2f} {w:7.2f} {mib * 1.048576 / w:7.0f}")
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        fd, s, w = write(b, mib, buf)
        print(f"{'buffered, pages just freed':<34} {s:7.2f} {w:7.2f} {mib * 1.048576 / w:7.0f}")
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        fd, s, w = write(c, mib, buf, os.O_DIRECT)
        print(f"{'O_DIRECT (the disk)':<34} {s:7.2f} {w:7.2f} {mib * 1.048576 / w:7.0f}")
        os.close(fd)
    finally:
        for p in (a, b, c):
            if os.path.exists(p):
                os.unlink(p)

if __name__ == "__main__":
    main()
