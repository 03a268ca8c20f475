"""The PostgreSQL backend against a real server (tests/postgres_server.py: a throwaway cluster
on 127.0.0.1; skipped when PostgreSQL is not installed, failed under OLOPROOF_REQUIRE_POSTGRES=1)."""

from __future__ import annotations

import pytest

from oloproof.store import open_store
from oloproof.store.postgres import PostgresStore
from oloproof.testing import StoreContract


class TestPostgresStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _server(self, postgres_server):
        self.server = postgres_server

    def make_store(self, tmp_path):
        return open_store(self.server.new_database())

    def reopen(self, store, *, readonly=False):
        return PostgresStore(store.url, readonly=readonly)  # the tests' URLs hold no password
