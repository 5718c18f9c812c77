"""A live Queuey driven by real AWS clients: boto3 and the AWS CLI, over the
JSON protocol (what they speak today) and the query protocol (an older SQS
model put first on botocore's data path, see :mod:`tests.sqs.query_model`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import botocore.session
import pytest
from botocore.config import Config

from tests.support import SQS_SECRET

REGION = "us-east-1"
BACKENDS = ["sqlite", pytest.param("cassandra", marks=pytest.mark.cassandra)]
PROTOCOLS = ["json", "query"]


def botocore_session(protocol: str) -> botocore.session.Session:
    session = botocore.session.Session()
    if protocol == "query":
        from tests.sqs.query_model import query_model_path

        loader = session.get_component("data_loader")
        loader.search_paths.insert(0, str(query_model_path()))
    return session


def make_client(url: str, access_key: str, protocol: str, secret: str = SQS_SECRET, **config):
    session = boto3.session.Session(
        aws_access_key_id=access_key,
        aws_secret_access_key=secret,
        region_name=REGION,
        botocore_session=botocore_session(protocol),
    )
    client = session.client(
        "sqs",
        endpoint_url=url,
        config=Config(**{"retries": {"max_attempts": 0}, "read_timeout": 30, **config}),
    )
    assert client.meta.service_model.protocol == protocol
    return client


@dataclass
class SQSServer:
    url: str
    server: object
    application: str
    remote_application: str
    protocol: str
    clients: list = field(default_factory=list)

    def client(self, **kw):
        made = make_client(self.url, self.application, self.protocol, **kw)
        self.clients.append(made)
        return made

    def close(self) -> None:
        """Close the clients' keep-alive connections, which would hold the server's
        shutdown until they time out."""
        for made in self.clients:
            made.close()

    @property
    def app(self):
        return self.server.app


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture(params=PROTOCOLS)
def protocol(request) -> str:
    return request.param


@pytest.fixture
def sqs(make_live_server, backend, protocol, test_apps):
    """A live server on each backend, with a client factory for each protocol."""
    server = make_live_server(backend)
    found = SQSServer(server.url, server, test_apps.app, test_apps.remote_app, protocol)
    yield found
    found.close()


@pytest.fixture
def client(sqs):
    return sqs.client()


class AWSCLI:
    """The AWS CLI (v1, from PyPI) run as a user would, with JSON output."""

    def __init__(self, url: str, access_key: str, protocol: str, home: Path) -> None:
        self.url = url
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": SQS_SECRET,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": str(home / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
            # As a user's CLI does: a 503 (Cassandra busy on a loaded 2-core box,
            # answered with Retry-After) is sent again; a 4xx never is.
            "AWS_MAX_ATTEMPTS": "3",
        }
        if protocol == "query":
            from tests.sqs.query_model import query_model_path

            self.env["AWS_DATA_PATH"] = str(query_model_path())

    def __call__(self, *args: str, check: bool = True) -> dict | str:
        aws = shutil.which("aws", path=str(Path(sys.executable).parent))
        assert aws, "the awscli package is not installed in the virtualenv"
        done = subprocess.run(
            [aws, "sqs", *args, "--endpoint-url", self.url, "--output", "json"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"aws sqs {' '.join(args)} failed: {done.stderr}")
        if not check:
            return done  # type: ignore[return-value]
        return json.loads(done.stdout) if done.stdout.strip() else {}


@pytest.fixture
def aws(sqs, tmp_path) -> AWSCLI:
    home = tmp_path / "aws-home"
    home.mkdir()
    return AWSCLI(sqs.url, sqs.application, sqs.protocol, home)
