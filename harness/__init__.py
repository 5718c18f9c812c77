"""Service harness: real Cassandra and ZooKeeper on loopback for tests and development.

A development tool that runs from a clone of the repository, beside the
``queuey`` package and not installed with it: it finds the service
configuration in the checkout's ``etc/`` (Maven poms whose jars are resolved
from Maven Central into ``~/.m2``, config templates) and keeps runtime state
under the checkout's ``var/`` (or ``$QUEUEY_VAR_DIR``). See
``python -m harness --help``, run from the checkout's root.
"""
