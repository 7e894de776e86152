from __future__ import annotations

import pytest

from tests.core.folds import FOLDS, Fold


@pytest.fixture(params=sorted(FOLDS))
def fold(request: pytest.FixtureRequest) -> Fold:
    """Each fold implementation in turn (pure reducer, store dispatch, store batch)."""
    return FOLDS[request.param]
