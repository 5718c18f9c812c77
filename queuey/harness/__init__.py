"""Service harness: real Cassandra and ZooKeeper on loopback for tests and development.

Jars are resolved from Maven Central by Maven (poms in ``etc/``) and stay in
``~/.m2``; runtime state lives under ``var/`` (or ``$QUEUEY_VAR_DIR``). See
``python -m queuey.harness --help``.
"""
