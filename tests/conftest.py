"""Project-wide test settings: run asyncio tests on uvloop, as the services do in production."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], Any]]:
    return {"uvloop": uvloop.new_event_loop}
