"""Queuey: a durable, partitioned message queue served over HTTP."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

# Every dependency of the project, pinned with compatible ranges, in one place.
REQUIRES = [
    "pyramid>=2.0,<3",
    "waitress>=3.0,<4",  # the tests' in-process servers; pserve with egg:waitress#main
    "granian>=2.5,<3",  # the production server (queuey.server): Rust HTTP, worker processes
    "cassandra-driver>=3.29,<4",
    "kazoo>=2.10,<3",
    "requests>=2.31,<3",
    "httpx>=0.28,<1",  # the asyncio client (queuey.client.aio): httpx.AsyncClient
    "opentelemetry-api>=1.27,<2",  # trace context through queues (queuey.tracing); no exporter
    "prometheus_client>=0.20,<1",
    "pydantic>=2.7,<3",
    "pyramid_jinja2>=2.10,<3",  # the admin pages' templates
    "rich>=13.7,<16",  # the queuey CLI: tables and progress bars
    "orjson>=3.10,<4",  # JSON in and out of the API (queuey.jsonio)
    "botocore>=1.40,<2",  # the SQS endpoint's shapes: botocore's model of SQS (queuey.sqs.api)
]
SPARK_REQUIRES = [
    "pyspark>=4.0,<4.4",  # 4.1: filter push-down; 4.2: admission control, available-now
    "pyarrow>=15",
    "pandas>=2.0",
]
TEST_REQUIRES = SPARK_REQUIRES + [
    "pytest>=8,<9",
    "pytest-timeout>=2.3,<3",
    "pytest-xdist>=3.6,<4",  # make test: the suite on parallel workers (tests/parallel.py)
    "webtest>=3.0,<4",
    "psutil>=5.9",
    "hypothesis>=6.100,<7",
    "schemathesis>=4.30,<5",
    "boto3>=1.40,<2",  # tests/sqs: the SQS endpoint driven by real AWS clients
    "awscli>=1.42,<2",
    "selenium>=4.20,<5",  # tests/admin: the admin pages in headless Chromium
    "celery[sqs]>=5.4,<6",  # tests/sqs/test_celery.py: a Celery worker on the SQS endpoint
    "opentelemetry-sdk>=1.27,<2",  # tests/test_tracing.py: spans in the SDK's in-memory exporter
]
DEV_REQUIRES = TEST_REQUIRES + [
    "ruff>=0.6",
    "sphinx>=7,<10",
    "pyinstrument>=4.6",
    "pika>=1.3,<2",  # bench/rabbitmq.py: the RabbitMQ peer
]

setup(
    name="queuey",
    version="0.1.0",
    description="A durable, partitioned message queue served over HTTP",
    long_description=(HERE / "README.rst").read_text(encoding="utf-8"),
    long_description_content_type="text/x-rst",
    license="MPL-2.0",
    python_requires=">=3.11",
    # The service harness and the benchmarks are development tools that run from
    # a checkout (they find etc/ and var/ there): not installed.
    packages=find_packages(
        exclude=["tests", "tests.*", "harness", "harness.*", "bench", "bench.*"]
    ),
    include_package_data=True,
    package_data={"queuey.admin": ["templates/*.jinja2", "static/*"]},
    zip_safe=False,
    install_requires=REQUIRES,
    extras_require={
        "spark": SPARK_REQUIRES,
        "test": TEST_REQUIRES,
        "dev": DEV_REQUIRES,
    },
    entry_points={
        "paste.app_factory": ["main = queuey:main"],
        "paste.server_runner": ["granian = queuey.server:granian"],
        "console_scripts": [
            "queuey = queuey.cli:main",
            "queuey-worker = queuey.client.worker.cli:main",
        ],
    },
    classifiers=[
        "Framework :: Pyramid",
        "Programming Language :: Python :: 3.11",
        "Topic :: Internet :: WWW/HTTP :: WSGI :: Application",
    ],
)
