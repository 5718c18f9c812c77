"""Amazon's SQS model from before SQS moved to the JSON protocol, for tests.

Current botocore speaks only AWS JSON 1.0 to SQS. The last releases whose SQS
model still said ``"protocol": "query"`` (and already had the message move
tasks) let today's boto3 and AWS CLI speak the query protocol, as older SDKs
do: put the directory :func:`query_model_path` returns first on botocore's
data path (``AWS_DATA_PATH`` for the CLI). The wheel comes from PyPI once and
is kept under ``.venv`` (not in the repository).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

#: The newest botocore release whose SQS model is the query protocol's.
BOTOCORE_VERSION = "1.31.72"
MODEL = "botocore/data/sqs/2012-11-05/"
ROOT = Path(__file__).resolve().parents[2] / ".venv" / "sqs-query-model"


def query_model_path() -> Path:
    """A directory holding ``sqs/2012-11-05/service-2.json`` of the query protocol."""
    done = ROOT / "complete"
    if done.exists():
        return ROOT
    wheels = ROOT / "wheel"
    wheels.mkdir(parents=True, exist_ok=True)
    found = list(wheels.glob(f"botocore-{BOTOCORE_VERSION}-*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                f"botocore=={BOTOCORE_VERSION}",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(wheels),
            ],
            check=True,
            timeout=300,
        )
        found = list(wheels.glob(f"botocore-{BOTOCORE_VERSION}-*.whl"))
    target = ROOT / "sqs" / "2012-11-05"
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[0]) as wheel:
        for name in ("service-2.json", "paginators-1.json"):
            (target / name).write_bytes(wheel.read(MODEL + name))
    model = json.loads((target / "service-2.json").read_text())
    assert model["metadata"]["protocol"] == "query", model["metadata"]
    done.write_text(BOTOCORE_VERSION)
    return ROOT


def old_model() -> dict:
    return json.loads((query_model_path() / "sqs" / "2012-11-05" / "service-2.json").read_text())
