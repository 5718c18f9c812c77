"""The ``queuey`` command: operator tasks.

queuey keygen NAME                 print a new key and the lines to add for it
queuey schema upgrade -c INI       create or migrate the storage schema (idempotent)
queuey schema show -c INI          print the schema version the store has
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from queuey.applications import generate_key
from queuey.clock import SYSTEM_CLOCK
from queuey.errors import ConfigurationError, ServiceError
from queuey.settings import load_settings


def _settings(config_uri: str) -> dict:
    from pyramid.paster import get_appsettings, setup_logging

    setup_logging(config_uri)
    return dict(get_appsettings(config_uri))


def cmd_keygen(args: argparse.Namespace) -> int:
    key, stored = generate_key()
    print(f"# New key for {args.name}; give it to the application, it is not stored anywhere:")
    print(f"#   {key}")
    print("# Add (or append the keys line of) this section in the applications file:")
    print(f"[application:{args.name}]")
    print(f"keys = {stored}")
    print("allow = 127.0.0.0/8, ::1/128")
    return 0


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="queuey", description="Queuey operator commands")
    sub = parser.add_subparsers(dest="command", required=True)
    keygen = sub.add_parser("keygen", help="generate a key for an application")
    keygen.add_argument("name")
    keygen.set_defaults(func=cmd_keygen)
    schema = sub.add_parser("schema", help="create or upgrade the storage schema")
    schema.add_argument("action", choices=["upgrade", "show"])
    schema.add_argument("-c", "--config", default="development.ini", help="ini file")
    schema.set_defaults(func=cmd_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        return args.func(args)
    except ConfigurationError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
