"""``python -m app.cli``: the same as the ``agent-gateway`` command."""

from app.cli.main import main

raise SystemExit(main())
