"""The ``ferry`` command: one module per command group, wired in :mod:`.main`."""
