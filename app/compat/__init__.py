"""Fast paths that use a dependency's internals, one module per package; each checks those
internals at start-up and falls back to the public API when they do not match."""
