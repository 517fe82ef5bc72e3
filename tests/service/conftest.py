"""Fixtures: a recording downstream OTLP server and a factory of running services."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from otel_progress import Config
from otel_progress.service.options import ServiceConfig
from otel_progress.service.server import ProgressService

from .helpers import Client, Downstream


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    ds = Downstream().start()
    yield ds
    ds.stop()


@pytest.fixture
def make_service() -> Iterator[Callable[..., ProgressService]]:
    started: list[ProgressService] = []

    def factory(engine_config: Config | None = None, **options: Any) -> ProgressService:
        options.setdefault("listen", "127.0.0.1:0")
        options.setdefault("health_listen", "127.0.0.1:0")
        options.setdefault("drain_timeout", 2.0)
        service = ProgressService(ServiceConfig(**options), engine_config or Config()).start()
        started.append(service)
        return service

    yield factory
    for service in started:
        service.stop(grace=0.5)


@pytest.fixture
def client_for() -> Iterator[Callable[[ProgressService], Client]]:
    clients: list[Client] = []

    def factory(service: ProgressService) -> Client:
        client = Client(f"127.0.0.1:{service.port}")
        clients.append(client)
        return client

    yield factory
    for c in clients:
        c.close()
