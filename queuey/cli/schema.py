"""``queuey schema upgrade|show``: the configured backend's storage schema.

These commands open the store named in an ini file directly (no running
service needed), unlike the commands of :mod:`queuey.cli.remote`.
"""

from __future__ import annotations

import argparse
import importlib

from queuey.clock import SYSTEM_CLOCK
from queuey.settings import load_settings


def _settings(config_uri: str) -> dict:
    from pyramid.paster import get_appsettings, setup_logging

    setup_logging(config_uri)
    return dict(get_appsettings(config_uri))


def cmd_schema(args: argparse.Namespace) -> int:
    """Create or upgrade the configured backend's schema, or show its version.

    The contract with a backend module that has a schema to migrate: it offers
    ``upgrade_schema(settings) -> list[str]`` (the steps applied, none when up to
    date) and ``schema_version(settings) -> str`` (for people, e.g. ``"1 of 1"``).
    Both backends offer them; a backend without them would create its schema
    when it is opened, which is all this command then does.
    """
    parsed = load_settings(_settings(args.config))
    backend = parsed.storage_backend
    module = importlib.import_module(backend)
    upgrade = getattr(module, "upgrade_schema", None)
    if upgrade is None:
        module.load_from_config(parsed.raw, SYSTEM_CLOCK).close()
        print(f"{backend}: schema ready")
        return 0
    if args.action == "show":
        print(f"{backend}: schema version {module.schema_version(parsed.raw)}")
        return 0
    applied = upgrade(parsed.raw)
    for step in applied:
        print(f"applied: {step}")
    print(f"{backend}: schema up to date ({len(applied)} step(s) applied)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    schema = sub.add_parser("schema", help="create or upgrade the storage schema")
    schema.add_argument("action", choices=["upgrade", "show"])
    schema.add_argument("-c", "--config", default="development.ini", help="ini file")
    schema.set_defaults(func=cmd_schema)
