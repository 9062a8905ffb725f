"""Tar streams for WriteFiles/ReadFile: files in with the session user's ownership, one file
out with a byte cap. Pure (bytes in, bytes out), so it is tested without an engine."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import PurePosixPath

from artfleet_sandbox.backend import FileSpec, InvalidArgument, InvalidPath
from artfleet_sandbox.paths import clean_relpath

_DEFAULT_MODE = 0o644
_DIR_MODE = 0o755


def _parents(path: str) -> list[str]:
    parts = PurePosixPath(path).parts[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def files_tar(files: Sequence[FileSpec], uid: int, gid: int) -> bytes:
    """A tar of `files` (paths relative to the workspace) owned by uid:gid.

    Parent directories get explicit entries: the engine would create missing ones as
    root, and the session's non-root user could then not write into them.
    """
    buffer = io.BytesIO()
    now = int(time.time())
    seen: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for spec in files:
            path = clean_relpath(spec.path)
            if spec.mode & ~0o7777:
                raise InvalidArgument(f"mode of {spec.path!r} is not a permission mode")
            for parent in _parents(path):
                if parent not in seen:
                    seen.add(parent)
                    tar.addfile(_info(parent, tarfile.DIRTYPE, 0, _DIR_MODE, uid, gid, now))
            # setuid/setgid bits are dropped: nothing in a workspace needs them.
            mode = (spec.mode or _DEFAULT_MODE) & 0o1777
            info = _info(path, tarfile.REGTYPE, len(spec.content), mode, uid, gid, now)
            tar.addfile(info, io.BytesIO(spec.content))
    return buffer.getvalue()


def _info(
    name: str, kind: bytes, size: int, mode: int, uid: int, gid: int, mtime: int
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = mode
    info.uid, info.gid = uid, gid
    info.mtime = mtime
    return info


class _ChunkReader(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (the engine's archive stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count


def first_file(chunks: Iterable[bytes], path: str, max_bytes: int) -> tuple[bytes, bool]:
    """At most `max_bytes` of the single file an archive stream holds, and whether it was cut.

    Streams the tar, so a huge file costs `max_bytes` of memory, not its size.
    """
    with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(chunks)), mode="r|") as tar:
        member = tar.next()
        if member is None:
            raise InvalidPath(f"no file at {path!r}")
        if member.isdir():
            raise InvalidPath(f"{path!r} is a directory")
        if not member.isfile():
            # Links are refused as the local backend refuses them: a link's target is the
            # command's choice, and the server must not read it on the command's behalf.
            raise InvalidPath(f"{path!r} is not a regular file")
        handle = tar.extractfile(member)
        assert handle is not None  # a regular file always has content
        data = handle.read(max_bytes)
        return data, member.size > len(data)
