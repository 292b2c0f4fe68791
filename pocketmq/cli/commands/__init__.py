"""One module per command group of the ``pocketmq`` command; :mod:`pocketmq.cli.app` assembles them."""
