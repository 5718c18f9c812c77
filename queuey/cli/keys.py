"""``queuey keygen``: a new application key and the applications-file lines for it."""

from __future__ import annotations

import argparse

from queuey.applications import generate_key


def cmd_keygen(args: argparse.Namespace) -> int:
    key, stored = generate_key()
    print(f"# New key for {args.name}; give it to the application, it is not stored anywhere:")
    print(f"#   {key}")
    print("# Add (or append the keys line of) this section in the applications file:")
    print(f"[application:{args.name}]")
    print(f"keys = {stored}")
    print("allow = 127.0.0.0/8, ::1/128")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    keygen = sub.add_parser("keygen", help="generate a key for an application")
    keygen.add_argument("name")
    keygen.set_defaults(func=cmd_keygen)
