"""Repositories prepared once per replica and seeded into each workspace from a tarball.

A repo task names a repository under the cache dir (the R2E-Gym training script's
`--cache-dir`: repos cached there beforehand) and, optionally, a commit. The first session
that asks builds one tar of it (`git archive` at the commit, or the directory as it is,
`.git` left out) under `<cache dir>/.artfleet-repos/`; every session after that only
unpacks the tar (local: `tar -x`; docker: one `put_archive`), instead of the client
uploading it file by file.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import subprocess
import tarfile
import tempfile

from artfleet_sandbox.backend import InvalidArgument, NotFound, RepoSpec, SandboxError

_COMMIT = re.compile(r"^[0-9A-Za-z._/-]{1,200}$")  # a sha, tag or branch; no options
TARBALL_DIR = ".artfleet-repos"


def _clean_dest(dest: str) -> str:
    if "\0" in dest:
        raise InvalidArgument("repo.dest: must not contain a NUL character")
    parts = [p for p in dest.split("/") if p not in ("", ".")]
    if dest.startswith("/") or ".." in parts:
        raise InvalidArgument(f"repo dest {dest!r} must be a relative path inside the workspace")
    return "/".join(parts)


class RepoCache:
    """Tarballs of cached repos, built at most once per (repo, commit, dest) and replica."""

    def __init__(self, cache_dir: str, uid: int = 1000) -> None:
        self.cache_dir = os.path.realpath(cache_dir)
        self.uid = uid
        self._locks: dict[str, asyncio.Lock] = {}

    def source_dir(self, spec: RepoSpec) -> str:
        if "\0" in spec.path:  # os.path refuses it with a ValueError
            raise InvalidArgument("repo.path: must not contain a NUL character")
        source = os.path.realpath(os.path.join(self.cache_dir, spec.path))
        if not spec.path or not source.startswith(self.cache_dir + os.sep):
            raise InvalidArgument(f"repo {spec.path!r} must name a dir inside the cache dir")
        if not os.path.isdir(source):
            raise NotFound(f"repo {spec.path!r} is not in the cache dir {self.cache_dir}")
        if (spec.commit and not _COMMIT.match(spec.commit)) or spec.commit.startswith("-"):
            raise InvalidArgument(f"invalid commit {spec.commit!r}")
        return source

    async def tarball(self, spec: RepoSpec) -> str:
        """The path of the repo's tar, built on first use (concurrent callers wait for it)."""
        key, target = await asyncio.to_thread(self._locate, spec)
        async with self._locks.setdefault(key, asyncio.Lock()):
            await asyncio.to_thread(self._ensure, spec, target)
        return target

    def _locate(self, spec: RepoSpec) -> tuple[str, str]:
        source = self.source_dir(spec)
        dest = _clean_dest(spec.dest)
        # Without a commit the tree may change between uses: its mtime is part of the key.
        version = spec.commit or f"tree-{os.stat(source).st_mtime_ns}"
        key = hashlib.sha256(f"{spec.path}\0{version}\0{dest}\0{self.uid}".encode()).hexdigest()
        return key, os.path.join(self.cache_dir, TARBALL_DIR, f"{key[:32]}.tar")

    def _ensure(self, spec: RepoSpec, target: str) -> None:
        if not os.path.exists(target):
            self._build(self.source_dir(spec), spec.commit, _clean_dest(spec.dest), target)

    def _build(self, source: str, commit: str, dest: str, target: str) -> None:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, staging = tempfile.mkstemp(dir=os.path.dirname(target), suffix=".part")
        os.close(fd)
        try:
            if commit:
                self._git_archive(source, commit, dest, staging)
            else:
                self._tar_tree(source, dest, staging)
            os.replace(staging, target)  # atomic: readers never see a half-written tar
        finally:
            if os.path.exists(staging):
                os.unlink(staging)

    def _git_archive(self, source: str, commit: str, dest: str, out: str) -> None:
        prefix = [f"--prefix={dest}/"] if dest else []
        raw = f"{out}.git"
        try:
            result = subprocess.run(
                ["git", "-C", source, "archive", "--format=tar", *prefix, "-o", raw, commit, "--"],
                capture_output=True,
                timeout=600,
            )
            if result.returncode != 0:
                message = result.stderr.decode(errors="replace").strip()[-500:]
                raise InvalidArgument(f"cannot archive commit {commit!r}: {message}")
            self._own(raw, out)
        finally:
            if os.path.exists(raw):
                os.unlink(raw)

    def _own(self, raw: str, out: str) -> None:
        """git archive's entries are root's; the docker engine keeps a tar's owners, and
        the session user must be able to edit the repo: the entries become its own."""
        with tarfile.open(raw) as src, tarfile.open(out, "w") as dst:
            for member in src:
                member.uid = member.gid = self.uid
                member.uname = member.gname = ""
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)

    def _tar_tree(self, source: str, dest: str, out: str) -> None:
        def owned(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
            if info.name.split("/")[-1] == ".git" or "/.git/" in f"/{info.name}/":
                return None
            info.uid = info.gid = self.uid
            info.uname = info.gname = ""
            return info

        with tarfile.open(out, "w") as tar:
            for entry in sorted(os.listdir(source)):
                arcname = f"{dest}/{entry}" if dest else entry
                tar.add(os.path.join(source, entry), arcname=arcname, filter=owned)


def extract(tarball: str, workdir: str) -> None:
    """Unpacks a prepared tar into a fresh workspace (the tar is ours, built above)."""
    result = subprocess.run(
        ["tar", "-xf", tarball, "-C", workdir, "--no-same-owner"], capture_output=True, timeout=600
    )
    if result.returncode != 0:
        raise SandboxError(
            f"seeding the workspace failed: {result.stderr.decode(errors='replace')}"
        )
