"""A Debian package read with Python's standard library, and fetched with apt-get.

The helpers the question-set builders share (``python-faq.py``, ``postgresql.py``,
``debian-reference.py`` here and ``../make-natural-questions-set.py``): a .deb is an ar archive
whose ``control.tar.*`` names the package and its version and whose ``data.tar.*`` holds the files.
xz and gzip members are read; a zstd one is refused with what to do instead.
"""

from __future__ import annotations

import io
import lzma
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Callable


def fail(message: str) -> None:
    """Prints ``<script>: error: message`` and exits 1."""
    print(f"{Path(sys.argv[0]).stem}: error: {message}", file=sys.stderr)
    sys.exit(1)


def ar_members(data: bytes) -> dict[str, bytes]:
    """The members of an ar archive (a .deb is one), by name."""
    if not data.startswith(b"!<arch>\n"):
        fail("not a .deb (no ar header)")
    members, pos = {}, 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        members[name] = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size % 2)
    return members


def member_tar(members: dict[str, bytes], stem: str) -> tarfile.TarFile:
    """The tar member ``stem.tar[.xz|.gz]`` of a .deb, opened."""
    for name, blob in members.items():
        if not name.startswith(stem + ".tar"):
            continue
        if name.endswith(".zst"):
            fail(f"{name} is zstd-compressed, which Python's standard library cannot read; "
                 f"pass the .deb of another version with --deb")
        if name.endswith(".xz"):
            blob = lzma.decompress(blob)
        return tarfile.open(fileobj=io.BytesIO(blob), mode="r:*")
    fail(f"the .deb has no {stem}.tar.*")
    raise AssertionError


def read_files(path: Path, package: str, root: str, wanted: Callable[[str], bool]) -> tuple[str, dict[str, bytes]]:
    """(version, {path under root: bytes}) of the regular files under ``root`` (a path inside the
    package, ending in ``/``) whose path under it ``wanted`` accepts, from the .deb at ``path``,
    after checking that the .deb is ``package``."""
    members = ar_members(path.read_bytes())
    control = member_tar(members, "control")
    version = ""
    for info in control.getmembers():
        if info.name.lstrip("./") == "control":
            text = control.extractfile(info).read().decode("utf-8")
            name = re.search(r"^Package:\s*(\S+)", text, re.M)
            found = re.search(r"^Version:\s*(\S+)", text, re.M)
            if not name or name.group(1) != package:
                fail(f"{path} is not {package} (Package: {name.group(1) if name else '?'})")
            version = found.group(1) if found else ""
    files = {}
    data = member_tar(members, "data")
    for info in data.getmembers():
        name = info.name[2:] if info.name.startswith("./") else info.name
        if info.isfile() and name.startswith(root) and wanted(name[len(root):]):
            files[name[len(root):]] = data.extractfile(info).read()
    return version, files


def download(package: str, folder: Path, specs: list[str] | None = None) -> Path:
    """``apt-get download`` of the first of ``specs`` (default: the package itself; a pinned
    ``package=version`` first, then the package, falls back to what apt has) into ``folder``."""
    for spec in specs or [package]:
        print(f"apt-get download {spec} (in {folder})", file=sys.stderr)
        try:
            if subprocess.run(["apt-get", "download", spec], cwd=folder).returncode == 0:
                break
        except OSError as err:
            fail(f"cannot run apt-get ({err}); pass --deb FILE")
    else:
        fail(f"`apt-get download {package}` failed; run `apt-get update` first, or pass --deb FILE")
    debs = sorted(folder.glob(f"{package}_*.deb"))
    if not debs:
        fail(f"apt-get download left no {package}_*.deb in {folder}")
    return debs[-1]
