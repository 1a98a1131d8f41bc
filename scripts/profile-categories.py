#!/usr/bin/env python3
"""Groups a system-wide CPU profile into the categories docs/architecture.md
quotes (TCP send and receive, AES-GCM, pwrite and fdatasync, copies, the
allocator, idle, ...) and prints each one's share of the samples and, with
--ops-per-s, its CPU microseconds per operation on this machine's cores.

A sample goes to the first category whose function appears anywhere on its
stack (kernel stacks are whole; Rust frames without frame pointers are not,
so what matches nothing is "code" — HTTP, TLS framing, tasks, the engine).

Usage, while a benchmark phase runs (strata bench-cluster's PUT phase, say):
    perf record -a -g -F 499 -o perf.data -- sleep 6
    perf script -i perf.data -F comm,ip,sym | scripts/profile-categories.py --ops-per-s 1256
"""
import argparse
import collections
import os
import sys

# (category, a function name fragment on the stack), first match wins.
CATEGORIES = [
    ("fsync", "ext4_sync_file"),
    ("pwrite", "__x64_sys_pwrite64"),
    ("tcp send", "tcp_sendmsg"),
    ("tcp receive", "tcp_recvmsg"),
    ("network softirq", "net_rx_action"),
    ("interrupts", "common_interrupt"),
    ("scheduler", "__schedule"),
    ("page faults", "exc_page_fault"),
    ("futex", "futex"),
    ("epoll", "epoll_wait"),
    ("aes-gcm", "aes_gcm"),
    ("ghash", "ghash"),
    ("crc32c", "crc32"),
    ("copies (memmove)", "memmove"),
    ("memcmp", "memcmp"),
    ("allocator (malloc)", "malloc"),
    ("allocator (free)", "free"),
    ("kernel workers", "worker_thread"),
    ("idle", "pv_native_safe_halt"),
    ("other syscalls", "entry_SYSCALL"),
]


def samples(lines):
    """Yields each sample's stack (leaf first) from `perf script -F comm,ip,sym`."""
    stack, started = [], False
    for line in lines:
        if not line.strip():
            continue
        if not line.startswith("\t"):  # a sample's header: its command name
            if started:
                yield stack
            stack, started = [], True
            continue
        parts = line.split()
        if len(parts) >= 2:
            stack.append(parts[1])
    if started:
        yield stack


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops-per-s", type=float, help="operations per second in the profiled phase: also print CPU us per operation")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    counts, total = collections.Counter(), 0
    for stack in samples(sys.stdin):
        total += 1
        name = next((c for c, frag in CATEGORIES if any(frag in f for f in stack)), "code")
        counts[name] += 1
    if total == 0:
        sys.exit("no samples on standard input (pipe `perf script -F comm,ip,sym` into this)")
    for name, n in counts.most_common():
        share = n / total
        per_op = f"  {share * a.cores * 1e6 / a.ops_per_s:7.0f} us/op" if a.ops_per_s else ""
        print(f"{100 * share:5.1f}%{per_op}  {name}")


if __name__ == "__main__":
    main()
