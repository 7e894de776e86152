"""Fast paths that read a dependency's private internals: one module per package, each with its
start-up check (``providers.compat.probe``); ``[gateway] fast_paths = false`` forces the public
paths."""
