"""``python -m queuey.client.worker``: the same as ``queuey-worker``."""

import sys

from queuey.client.worker.cli import main

sys.exit(main())
