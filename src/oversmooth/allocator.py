"""glibc's malloc settings for a process that runs deep forwards on the CPU (torch-free).

A forward of a deep model allocates and frees the same few-MiB temporaries in every layer
(its scores, gathered rows, products).  By default glibc serves a block above its *mmap
threshold* (128 KiB, raised as large blocks are freed, up to 32 MiB) with a fresh ``mmap``
and gives free memory at the top of its heap back to the system above its *trim threshold*
(twice the mmap threshold).  Either way the next layer's temporaries land on pages the kernel
must fault in and zero again: thousands of page faults per layer.  How many depends on the
order of earlier allocations, so the same forward took anything from 1x to 2x its time from
one process to the next (a float64 forward of the 256-layer Post-LN SAN on Cora: about a
million faults by default, 2,500 with the thresholds below).

:func:`keep_freed_memory` fixes both thresholds (blocks up to :data:`MMAP_THRESHOLD` come from
the heap; up to :data:`TRIM_THRESHOLD` of free heap is kept), so that freed temporaries are
reused without faults.  Measured on 2 cores, that forward in a fresh process (one thread,
best of 3): 1.66-1.80 s by default, 1.82-2.03 s with only one of the two thresholds set,
0.83-0.84 s with both (since the sampled products gather into kept buffers, 1.44-1.60 s by
default against 1.00-1.05 s, on loaded cores); the ``"edge"`` kernel's float32 forward 1.2 s
against 0.54 s.  Blocks above the mmap threshold (the ``[n, d]`` states of a
million-node graph) are still mapped and unmapped as before, so the memory a large run
holds is unchanged; a small one keeps at most :data:`TRIM_THRESHOLD` of freed memory.

The ``oversmooth`` command calls it at start (as it sets OpenMP's spin count), and so do its
sweep workers; in your own process call it yourself.  It is a no-op (returns ``False``) where
the C library is not glibc, and where the environment already chooses either threshold
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``GLIBC_TUNABLES``).
"""

from __future__ import annotations

import os

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory", "mallopt"]

#: Blocks up to this size come from the heap (glibc's largest dynamic threshold).
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free memory at the top of the heap kept for reuse, up to this much.
TRIM_THRESHOLD = 64 * 1024 * 1024

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def mallopt(mmap_threshold: int | None = None, trim_threshold: int | None = None) -> bool:
    """Set glibc's ``M_MMAP_THRESHOLD`` and/or ``M_TRIM_THRESHOLD`` (bytes) in this process;
    ``False`` where there is no glibc or it refused a value."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        done = True
        if mmap_threshold is not None:
            done = bool(libc.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold))) and done
        if trim_threshold is not None:
            done = bool(libc.mallopt(_M_TRIM_THRESHOLD, int(trim_threshold))) and done
        return done
    except (OSError, AttributeError):
        return False


def keep_freed_memory() -> bool:
    """Fix the mmap threshold at :data:`MMAP_THRESHOLD` and the trim threshold at
    :data:`TRIM_THRESHOLD` (see the module docstring) unless the environment chose either;
    ``True`` when they were set."""
    if any(name in os.environ for name in _USER_SETTINGS):
        return False
    if "malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    return mallopt(MMAP_THRESHOLD, TRIM_THRESHOLD)
