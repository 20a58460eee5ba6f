"""Shared fixtures: the real Apache Kafka broker (session-scoped) and helpers."""

from __future__ import annotations

pytest_plugins = ["gengroup.testing.pytest_plugin"]
