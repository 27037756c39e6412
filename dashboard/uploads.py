"""Uploaded model files, kept on the server under their content hash while a page uses them.

A page's URL names its upload as `upload=<hash>/<file name>`, so a reload or a copied link opens the
same model while any page of this server still holds the file (a reload's new page takes it before
the old page lets go). A file no page holds is deleted, and every file goes with the server process.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

import engine


class UploadStore:
    """Files by `<hash>/<name>` key in one temporary folder, each deleted once no holder is left."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="dnn-explorer-uploads-"))
        self._holders: dict[str, set[int]] = {}  # key -> ids of the sessions that use the file
        self._lock = threading.Lock()  # pages come and go on the server's thread, imports in worker threads
        weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)

    def put(self, data: bytes, filename: str, holder: int) -> str:
        """Store `data` (once per content) for `holder`; its key, `<first 16 hex of sha256>/<file name>`."""
        key = f"{hashlib.sha256(data).hexdigest()[:16]}/{Path(filename).name or 'model.onnx'}"
        with self._lock:
            path = self.root / key
            if not path.is_file():
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(data)
            self._holders.setdefault(key, set()).add(holder)
        return key

    def path(self, key: str, holder: int | None = None) -> Path:
        """The stored file of `key`, now held by `holder` too (if given); EngineError when no page of this server
        has it."""
        path = self.root / key
        with self._lock:
            if "/" not in key or ".." in key or not path.is_file():
                name = key.rpartition("/")[2] or key
                raise engine.EngineError(f"the uploaded file '{name}' is no longer on this server (an upload is kept "
                                         "while a page uses it); upload it again")
            if holder is not None:
                self._holders.setdefault(key, set()).add(holder)
        return path

    def release(self, holder: int) -> None:
        """`holder` (a closed page) uses none of its files any more; files nobody holds are deleted."""
        with self._lock:
            for key, holders in list(self._holders.items()):
                holders.discard(holder)
                if not holders:
                    del self._holders[key]
                    (self.root / key).unlink(missing_ok=True)
                    try:
                        (self.root / key).parent.rmdir()
                    except OSError:  # the same content under another name is still held
                        pass

    def scrub(self, text: str) -> str:
        """`text` with every stored file's path replaced by its file name (a message names the user's file)."""
        return re.sub(re.escape(str(self.root)) + r"/[0-9a-f]{16}/", "", text)

    def keys(self) -> list[str]:
        """The keys of the files stored now."""
        with self._lock:
            return sorted(self._holders)


_STORE: list[UploadStore] = []  # the server process's store, made at the first upload


def store() -> UploadStore:
    """This server's upload store (one per process: a link's upload must be found by any page)."""
    if not _STORE:
        _STORE.append(UploadStore())
    return _STORE[0]
