"""SQS queues on Queuey queues: names, URLs, ARNs, regions and tags.

An SQS queue is a Queuey queue (its attributes: :mod:`queuey.sqs.attributes`);
tags are ``sqs.tag.<key>`` entries of the queue's ``attributes``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from queuey.errors import QueueNotFound
from queuey.model import QueueMeta
from queuey.settings import REGION
from queuey.sqs.errors import SQSError, invalid, refusal

STANDARD_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
FIFO_NAME = re.compile(r"^[A-Za-z0-9_-]{1,75}\.fifo$")
#: What a queue name can start with (a ListQueues prefix that cannot matches nothing).
NAME_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,80}\Z")
ARN = re.compile(r"^arn:aws:sqs:([a-z0-9-]+):([0-9]{12}):([A-Za-z0-9_.-]{1,80})$")
TAG_PREFIX = "sqs.tag."
MAX_TAGS = 50
#: SQS's default retention (4 days), capped by ``queuey.max_ttl``.
DEFAULT_RETENTION = 345600


def check_name(name: object, fifo: bool) -> str:
    """A CreateQueue ``QueueName``, refused in SQS's words; ``fifo``: whether
    the queue is made with ``FifoQueue`` true (its name must end in .fifo)."""
    if fifo:
        if not isinstance(name, str) or not FIFO_NAME.match(name):
            raise invalid(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, "
                "or underscores, must end with .fifo suffix and be 1 to 80 in length",
            )
    elif not isinstance(name, str) or not STANDARD_NAME.match(name):
        raise invalid(
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        )
    return name


#: Between a region and an SQS name in the stored name of a queue of a region
#: other than the home region (no queue name holds it).
REGION_SEPARATOR = ":"


@dataclass(frozen=True)
class Place:
    """Where this endpoint's queues live for one application and request.

    Queues are regional, as in SQS: a queue of the home region (``queuey.sqs.region``)
    is stored under its own name, so it is the native queue of that name; one of
    another region is stored as ``<region>:<name>``, which no other region sees.
    Methods take and give stored names; :meth:`url` and :meth:`arn` show the SQS
    name, and the region a stored name belongs to.
    """

    base_url: str  # scheme://host[:port], from the request
    account_id: str
    region: str  # the region the request was signed for
    home_region: str

    def stored(self, name: str) -> str:
        """The stored name of this region's queue ``name``."""
        if self.region == self.home_region:
            return name
        return f"{self.region}{REGION_SEPARATOR}{name}"

    def local(self, stored: str) -> str | None:
        """The SQS name of a stored queue, when it is one of this region's."""
        region, _, name = stored.rpartition(REGION_SEPARATOR)
        if (region or self.home_region) != self.region:
            return None
        return name

    def url(self, stored: str) -> str:
        return f"{self.base_url}/{self.account_id}/{_sqs_name(stored)}"

    def arn(self, stored: str) -> str:
        region, _, name = stored.rpartition(REGION_SEPARATOR)
        return f"arn:aws:sqs:{region or self.home_region}:{self.account_id}:{name}"

    def locate(self, url: object) -> tuple[str, str]:
        """The account and stored queue name a ``QueueUrl`` names: a URL (or its
        path) ``/<account id>/<name>``, or a bare queue name (the caller's)."""
        if not isinstance(url, str) or len(url) > 2048:
            raise no_such_queue()
        path = urlsplit(url).path if "://" in url else url
        parts = [p for p in path.split("/") if p]
        if len(parts) == 1 and "/" not in url:
            parts = [self.account_id, parts[0]]
        if len(parts) != 2 or not parts[0].isdigit() or len(parts[0]) != 12:
            raise no_such_queue()
        name = parts[1]
        if not (STANDARD_NAME.match(name) or FIFO_NAME.match(name)):
            raise no_such_queue()
        return parts[0], self.stored(name)

    def name_from_arn(self, arn: object, what: str) -> str:
        """The stored name of the queue an ARN names: this account's, in this region."""
        match = ARN.match(arn) if isinstance(arn, str) else None
        if match is None or match.group(2) != self.account_id or match.group(1) != self.region:
            raise invalid(
                f"Value {arn} for parameter {what} is invalid. Reason: not an ARN of a queue "
                "of this account in this region.",
            )
        return self.stored(match.group(3))


def stored_name(name: str) -> bool:
    """Whether ``name`` is the stored name of an SQS queue of some region."""
    region, separator, sqs = name.rpartition(REGION_SEPARATOR)
    if separator and not REGION.match(region):
        return False
    return bool(STANDARD_NAME.match(sqs) or FIFO_NAME.match(sqs))


def _sqs_name(stored: str) -> str:
    return stored.rpartition(REGION_SEPARATOR)[2]


def no_such_queue(name: str = "") -> SQSError:
    """SQS's answer for a queue that is not there (the catalogue's
    ``queue_not_found``, :data:`queuey.sqs.errors.REFUSALS`)."""
    return refusal(QueueNotFound(name))


def tags_of(meta: QueueMeta) -> dict[str, str]:
    return {
        key[len(TAG_PREFIX) :]: value
        for key, value in meta.attributes.items()
        if key.startswith(TAG_PREFIX)
    }


def check_tags(tags: object) -> dict[str, str]:
    if not isinstance(tags, Mapping):
        raise invalid("Tags must be a map of keys to values.")
    for key, value in tags.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 128:
            raise invalid("Tag keys must be 1 to 128 characters.")
        if not isinstance(value, str) or len(value) > 256:
            raise invalid("Tag values must be 0 to 256 characters.")
    return dict(tags)


def tag_attributes(attributes: Mapping[str, str], tags: Mapping[str, str]) -> dict[str, str]:
    """The attribute keys that hold ``tags``, checked against ``attributes``
    (the queue's map as read) for the tag limit."""
    added = {TAG_PREFIX + key: value for key, value in tags.items()}
    if len({k for k in attributes if k.startswith(TAG_PREFIX)} | added.keys()) > MAX_TAGS:
        raise invalid(f"A queue holds at most {MAX_TAGS} tags.")
    return added
