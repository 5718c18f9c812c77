"""Applications: who may use the service, with which keys, from where.

Applications live in an INI file named by ``queuey.applications``::

    [application:notifications]
    # several keys at once allow rotation; a key may be stored as its SHA-256
    keys =
        sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
        plain:a-development-key
    # where key-authenticated calls may come from (CIDR list)
    allow = 127.0.0.0/8, ::1/128
    # the SQS endpoint (docs/sqs.rst): the secret access key(s) of this
    # application (its access key id is its name), in clear because SigV4's
    # HMAC needs it, or read from environment variables; and its account id
    sqs_secret_env = NOTIFICATIONS_SQS_SECRET
    account_id = 123456789012
    # this application's share (queuey.core.quotas); each falls back to its
    # queuey.limits.* setting, and 0 turns it off
    max_requests_per_second = 200
    max_burst = 400
    max_waiting_polls = 8
    max_queues = 100
    max_subscriptions = 20
    # what it may post and store (queuey.core.flow): messages posted per
    # second, messages and body bytes stored over all its queues
    max_posts_per_second = 500
    max_messages = 1000000
    max_bytes = 1073741824

Keys are compared in constant time (:func:`hmac.compare_digest` on SHA-256
digests) and never logged. ``queuey keygen NAME`` prints a new key and the
lines to add.
"""

from __future__ import annotations

import configparser
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from queuey.errors import ConfigurationError
from queuey.settings import LIMIT_RANGES, Network, address_in, parse_networks

SECTION_PREFIX = "application:"


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


ACCOUNT_ID = re.compile(r"^[0-9]{12}$")


def default_account_id(name: str) -> str:
    """A stable 12-digit SQS account id derived from the application's name."""
    return "%012d" % (int.from_bytes(digest(name)[:8], "big") % 10**12)


@dataclass(frozen=True)
class Application:
    name: str
    key_digests: tuple[bytes, ...]
    allow: tuple[Network, ...]
    #: SigV4 secret access keys for the SQS endpoint (none: SQS is refused).
    sqs_secrets: tuple[str, ...] = ()
    #: The 12-digit account id in this application's SQS queue URLs and ARNs.
    account_id: str = ""
    #: This application's limits (:mod:`queuey.core.quotas`); None: the
    #: ``queuey.limits.*`` setting of the same name.
    max_requests_per_second: float | None = None
    max_burst: int | None = None
    max_waiting_polls: int | None = None
    max_queues: int | None = None
    max_subscriptions: int | None = None
    max_posts_per_second: float | None = None
    max_messages: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if not self.account_id:
            object.__setattr__(self, "account_id", default_account_id(self.name))

    def key_matches(self, key: str | None) -> bool:
        """Constant-time check of ``key`` against every configured key."""
        if not key:
            return False
        offered = digest(key)
        matched = False
        for stored in self.key_digests:
            matched |= hmac.compare_digest(offered, stored)
        return matched

    def address_allowed(self, address: str | None) -> bool:
        return address_in(address, self.allow)


def by_account_id(applications: Mapping[str, Application], account: str) -> Application | None:
    """The application whose SQS account id is ``account``; None when there is
    none, or several (an account id configured twice names no one). A look
    through every application: asked only for calls on another account's queue."""
    found = [app for app in applications.values() if app.account_id == account]
    return found[0] if len(found) == 1 else None


def parse_key_spec(spec: str) -> bytes:
    """``sha256:<hex>`` or ``plain:<key>`` (a bare value counts as plain)."""
    kind, sep, value = spec.partition(":")
    if sep and kind == "sha256":
        raw = bytes.fromhex(value)
        if len(raw) != 32:
            raise ValueError("a sha256 key needs 64 hex digits")
        return raw
    if sep and kind == "plain":
        return digest(value)
    return digest(spec)


def sqs_secrets(plain: str, env_names: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The SQS secrets given in clear (``sqs_secret``) and through environment
    variables (``sqs_secret_env``), several of each allowed for rotation."""
    found = list(plain.split())
    for name in env_names.split():
        value = environ.get(name, "").strip()
        if not value:
            raise ValueError(f"sqs_secret_env: the environment variable {name} is not set")
        found.append(value)
    return tuple(found)


def account_id(value: str, name: str) -> str:
    value = value.strip()
    if not value:
        return default_account_id(name)
    if not ACCOUNT_ID.match(value):
        raise ValueError("account_id must be 12 digits")
    return value


def parse_limits(entry: Mapping[str, object]) -> dict[str, float | int]:
    """The limits an application's entry gives (absent ones are left out),
    each in the range its ``queuey.limits.*`` setting has (:data:`LIMIT_RANGES`)."""
    found: dict[str, float | int] = {}
    for key, (convert, low, high) in LIMIT_RANGES.items():
        raw = entry.get(key)
        if raw is None or str(raw).strip() == "":
            continue
        try:
            value = convert(str(raw).strip())
        except ValueError:
            raise ValueError(f"{key} must be a number, not {str(raw)[:40]!r}") from None
        if not low <= value <= high:
            raise ValueError(f"{key} must be between {low} and {high}, not {value}")
        found[key] = value
    return found


def load_applications(
    path: str | Path, environ: Mapping[str, str] | None = None
) -> dict[str, Application]:
    """Read the applications file; a bad entry stops start-up naming it."""
    file = Path(path)
    if not file.is_file():
        raise ConfigurationError("queuey.applications", f"no such file: {file}")
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(file, encoding="utf-8")
    environ = os.environ if environ is None else environ
    apps: dict[str, Application] = {}
    for section in parser.sections():
        if not section.startswith(SECTION_PREFIX):
            continue
        name = section[len(SECTION_PREFIX) :].strip()
        where = f"{file} [{section}]"
        try:
            specs = parser.get(section, "keys", fallback="").split()
            keys = tuple(parse_key_spec(spec) for spec in specs)
            allow = parse_networks(parser.get(section, "allow", fallback="127.0.0.1/32"))
            secrets_ = sqs_secrets(
                parser.get(section, "sqs_secret", fallback=""),
                parser.get(section, "sqs_secret_env", fallback=""),
                environ,
            )
            account = account_id(parser.get(section, "account_id", fallback=""), name)
            limits = parse_limits(parser[section])
        except ValueError as exc:
            raise ConfigurationError("queuey.applications", f"{where}: {exc}") from exc
        if not keys:
            raise ConfigurationError("queuey.applications", f"{where}: no keys")
        apps[name] = Application(
            name=name,
            key_digests=keys,
            allow=allow,
            sqs_secrets=secrets_,
            account_id=account,
            **limits,
        )
    if not apps:
        raise ConfigurationError("queuey.applications", f"{file}: no [application:NAME] section")
    check_distinct_sqs_secrets(apps, str(file))
    return apps


def check_distinct_sqs_secrets(apps: Mapping[str, Application], where: str) -> None:
    """Refuse one SQS secret shared by two applications.

    SigV4 does not sign the access key id: anyone holding a secret that two
    applications share could sign as either, by naming the other's access key.
    """
    owners: dict[str, str] = {}
    for app in apps.values():
        for secret in app.sqs_secrets:
            other = owners.setdefault(secret, app.name)
            if other != app.name:
                raise ConfigurationError(
                    "queuey.applications",
                    f"{where}: applications {other!r} and {app.name!r} share an SQS secret; "
                    "SigV4 does not sign the access key id, so each needs its own",
                )


def applications_from_mapping(entries: Mapping[str, Mapping[str, Iterable[str] | str]]) -> dict:
    """Build applications from a dict (used by tests and embedding code)."""
    apps = {}
    for name, entry in entries.items():
        keys = entry.get("keys", ())
        keys = keys.split() if isinstance(keys, str) else list(keys)
        allow = entry.get("allow", "127.0.0.0/8, ::1/128")
        allow = allow if isinstance(allow, str) else ", ".join(allow)
        sqs = entry.get("sqs_secrets", ())
        apps[name] = Application(
            name=name,
            key_digests=tuple(parse_key_spec(k) for k in keys),
            allow=parse_networks(allow),
            sqs_secrets=tuple(sqs.split() if isinstance(sqs, str) else sqs),
            account_id=account_id(str(entry.get("account_id", "")), name),
            **parse_limits(entry),
        )
    check_distinct_sqs_secrets(apps, "applications")
    return apps


def generate_key() -> tuple[str, str]:
    """A new random key and the ``sha256:`` line that stores it."""
    key = secrets.token_urlsafe(32)
    return key, "sha256:" + digest(key).hex()
