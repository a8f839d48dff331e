"""Nothing a client uploads is written to disk.

Django's default upload handlers stream a multipart file part larger than
2.5 MiB to a temporary file; the Kubernetes manifest gives ``/tmp`` a 16 MiB
in-memory volume, so a few concurrent form posts to ``/admin/`` could fill it.
Every body is capped at the edge (``TASKFORGE_MAX_PAYLOAD_BYTES``), so the
settings keep uploads in memory up to that cap. The check runs in a fresh
interpreter because the upload limits are derived from the cap when the
settings are imported: a cap above Django's 2.5 MiB default is the case
that used to reach the disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PARSE_ONE_UPLOAD = r"""
import io, os, sys
import django
django.setup()
from django.core.files.uploadedfile import InMemoryUploadedFile
from django.core.handlers.wsgi import WSGIRequest

size = int(sys.argv[1])
boundary = "taskforgeboundary"
body = (
    f"--{boundary}\r\n"
    'Content-Disposition: form-data; name="attachment"; filename="big.bin"\r\n'
    "Content-Type: application/octet-stream\r\n\r\n"
).encode() + b"x" * size + f"\r\n--{boundary}--\r\n".encode()
request = WSGIRequest({
    "REQUEST_METHOD": "POST",
    "PATH_INFO": "/admin/login/",
    "SERVER_NAME": "localhost",
    "SERVER_PORT": "80",
    "wsgi.input": io.BytesIO(body),
    "CONTENT_TYPE": f"multipart/form-data; boundary={boundary}",
    "CONTENT_LENGTH": str(len(body)),
})
upload = request.FILES["attachment"]
# While the request (and its upload) is alive, the temporary directory must stay empty.
print(type(upload).__name__, upload.size, sorted(os.listdir(os.environ["TMPDIR"])))
"""


def test_a_multipart_file_part_within_the_cap_stays_in_memory(tmp_path: Path) -> None:
    cap = 8 * 1024 * 1024
    part = 3 * 1024 * 1024  # above Django's 2.5 MiB default, below the cap
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "taskforge.settings",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY", "test-only-not-secret"),
        "TASKFORGE_MAX_PAYLOAD_BYTES": str(cap),
        "TMPDIR": str(scratch),
    }
    done = subprocess.run(
        [sys.executable, "-c", PARSE_ONE_UPLOAD, str(part)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(maxsplit=2) == ["InMemoryUploadedFile", str(part), "[]\n"]
    assert list(scratch.iterdir()) == []
