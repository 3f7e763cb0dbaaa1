"""Helpers shared by the end-to-end tests (a module name unique across the test tree)."""

from __future__ import annotations

import functools

import polling

# the end-to-end tests run subprocess brokers: a 50 ms step is plenty
wait_for = functools.partial(polling.wait_for, every=0.05)
