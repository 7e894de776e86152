"""Fast paths through other packages' private internals, one module (or package) per package.

Each is used only where its start-up check finds the internals it needs (else one warning, and
the package's public API is used), only while ``[gateway] fast_paths`` is true, and its
package is pinned exactly in ``pyproject.toml``. Nothing outside ``app/compat/`` touches
another package's private names.
"""
