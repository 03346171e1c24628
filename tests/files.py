"""Copying stores in tests without filling the disk.

An embedded store's shard files are mostly holes (the engine maps 32 MiB pages and chunks it has not written);
``shutil.copytree`` writes those holes out as zeros, so each copy of a small store costs hundreds of MB. CI's disk
filled that way once (stop 48: ``OSError: [Errno 28] No space left on device`` in ``test_store_damage``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def copy_tree(src: Path, dst: Path) -> None:
    """Copy the folder ``src`` to ``dst`` (which must not exist) with coreutils' ``cp -a --sparse=always``: modes,
    times and symlinks kept, runs of zeros left as holes. Raises CalledProcessError with cp's message."""
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True, capture_output=True, text=True)
