"""``python -m pocketmq.cli``: the same as the ``pocketmq`` command."""

import sys

from pocketmq.cli.app import main

sys.exit(main())
