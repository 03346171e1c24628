"""The data dir is its owner's alone: folders 0700, files 0600, whatever writes them (the ledger's and the cache's
SQLite files and their write-ahead logs, Qdrant Edge's shard files written by its Rust engine, objects, the vault).

``secure_data_dir`` sets the process's umask to ``PRIVATE_UMASK`` (every file and folder this process makes from
then on is created owner-only, the engine's included: a umask is the one setting every writer in the process
obeys) and tightens a data dir left looser by an earlier engram, saying so on stderr. The embedded default's
runtime (``workers.runtime.runtime``) calls it before it opens a store.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

#: The umask of an engram process that writes a data dir: no permission for group or others.
PRIVATE_UMASK = 0o077
_LOOSE = stat.S_IRWXG | stat.S_IRWXO


def _loose(path: Path) -> bool:
    try:
        return bool(path.lstat().st_mode & _LOOSE) and not path.is_symlink()
    except OSError:
        return False


def _tighten(path: Path) -> int:
    """chmod ``path`` and everything under it (symlinks not followed) to owner-only: folders 0700, files without
    group and other bits. Returns how many entries changed; one that cannot be changed is left (not ours)."""
    changed = 0
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files, ""]:
            entry = Path(root) / name if name else Path(root)
            try:
                mode = entry.lstat().st_mode
                if stat.S_ISLNK(mode) or not mode & _LOOSE:
                    continue
                os.chmod(entry, 0o700 if stat.S_ISDIR(mode) else stat.S_IMODE(mode) & ~_LOOSE)
                changed += 1
            except OSError:
                continue
    return changed


def secure_data_dir(path: Path) -> int:
    """Make ``path`` (the data dir) owner-only: the umask ``PRIVATE_UMASK`` from now on in this process, the folder
    made 0700 if missing, and, when it or one of its top two levels of entries is readable by others (a data dir of
    an earlier engram), every entry under it tightened (``_tighten``) with a warning on stderr. A data dir already
    0700 with owner-only entries is not walked (its entries are out of others' reach anyway). Returns how many
    entries were tightened."""
    os.umask(PRIVATE_UMASK)
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    near = [path, *(e for e in _entries(path)), *(e for d in _entries(path) if d.is_dir() for e in _entries(d))]
    if not any(_loose(e) for e in near):
        return 0
    changed = _tighten(path)
    if changed:
        sys.stderr.write(
            f"warning: {changed} files and folders under {path} were readable by other users; "
            "made owner-only (0700 folders, 0600 files)\n"
        )
    return changed


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []
