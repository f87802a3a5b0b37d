"""Where attempts run: one module per backend, looked up through :mod:`.registry`."""
