"""The capture's embedded sink gives memory the pipeline freed back to the system (issue 41)."""

from __future__ import annotations

import ctypes
import sys

import psutil
import pytest

from engram.api.capture.agent import _malloc_trim, release_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux") or _malloc_trim() is None, reason="glibc's malloc_trim")
def test_release_freed_memory_returns_freed_heap_pages():
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    # 100 MB in 8 kB blocks (below glibc's mmap threshold: from the heap), all freed but the last, which keeps the
    # heap's top in use: glibc's own trimming at free() cannot give the pages below it back
    blocks = [libc.malloc(8192) for _ in range(12_800)]
    for b in blocks:
        ctypes.memset(b, 1, 8192)  # touched: resident
    for b in blocks[:-1]:
        libc.free(b)
    held = psutil.Process().memory_info().rss
    release_freed_memory()
    after = psutil.Process().memory_info().rss
    libc.free(blocks[-1])
    assert held - after > 80 * 2**20, (held, after)
