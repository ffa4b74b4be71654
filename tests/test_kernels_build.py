"""service.engine.kernels.build takes ONNX Runtime's headers out of Debian's package on any Python 3.11 (no
`extract(filter=...)`, which came in 3.11.4): regular files only, none outside the folder."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from service.engine.kernels.build import write_member


def archive(members: dict[str, bytes]) -> tarfile.TarFile:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tar:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o4755  # a setuid bit that must not be carried over
            tar.addfile(info, io.BytesIO(content))
    data.seek(0)
    return tarfile.open(fileobj=data, mode="r:xz")


def test_a_header_is_written_with_its_bytes_under_its_folder(tmp_path: Path):
    with archive({"./usr/include/onnxruntime/core/session/onnxruntime_cxx_api.h": b"// api\n"}) as tar:
        (member,) = tar.getmembers()
        write_member(tar, member, tmp_path / "core/session/onnxruntime_cxx_api.h")
    written = tmp_path / "core/session/onnxruntime_cxx_api.h"
    assert written.read_bytes() == b"// api\n"
    assert not written.stat().st_mode & 0o6000


def test_a_member_that_climbs_out_is_refused(tmp_path: Path):
    with archive({"./usr/include/onnxruntime/../../../etc/passwd": b"x"}) as tar:
        (member,) = tar.getmembers()
        with pytest.raises(RuntimeError, match="leaves"):
            write_member(tar, member, tmp_path / "../../../etc/passwd")
