from __future__ import annotations

from pathlib import Path

import pytest

from tests.examples.support import DIST, build_example


@pytest.fixture(scope="session")
def example_build() -> Path:
    """examples/antd-x-chat/dist, built at most once per session."""
    build_example()
    return DIST
