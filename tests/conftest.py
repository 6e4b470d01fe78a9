"""Shared fixtures: gateways in process in front of one real mock upstream on 127.0.0.1, fresh
registries and databases per test."""

from __future__ import annotations

import functools
import gc
import os
import shutil
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import httpx2
import orjson
import pytest
import sqlalchemy as sa
from fastapi.dependencies import models as fastapi_dependency_models
from prometheus_client import CollectorRegistry

from proxy.app.gateway import Gateway
from proxy.app.serve import GatewayServer
from proxy.config import MirrorgateConfig, parse_document
from proxy.mock_upstream.behavior import parse_behavior
from proxy.mock_upstream.server import MockUpstreamServer
from proxy.store.exchanges import Store
from proxy.store.migrations import head_version
from tests import sdk_imports
from tests.asgi_driver import AppThread, async_transport, status_without_body, sync_transport

sdk_imports.defer()  # before any test module imports them (see tests/sdk_imports.py)

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
Returned = TypeVar("Returned")


MEMORY_TEMP_ROOT = Path("/dev/shm")


def pytest_configure(config: pytest.Config) -> None:
    """Temporary directories (`tmp_path`, the migrated template) in memory where the machine
    has a tmpfs at /dev/shm, unless `--basetemp` or `PYTEST_DEBUG_TEMPROOT` says where.

    Nearly every test opens a SQLite store in its `tmp_path`, and SQLite syncs the file to disk
    when it checkpoints, as the last connection closes: on this machine's disk that was ~8 ms
    of each in-process gateway's ~17 ms start and stop, and no test checks what survives a
    power cut. Each process (an xdist worker too) makes its own numbered directory there, as
    under the system's temporary directory, and pytest keeps the last three."""
    if config.option.basetemp or "PYTEST_DEBUG_TEMPROOT" in os.environ:
        return
    if MEMORY_TEMP_ROOT.is_dir() and os.access(MEMORY_TEMP_ROOT, os.W_OK | os.X_OK):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(MEMORY_TEMP_ROOT)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """Collect the tests without garbage collection, then put what exists (the imported modules,
    their classes and functions, the test items: some 300,000 objects that live to the end) out of
    the collector's sight.

    Collecting only builds what lives to the end, and a full collection walks every tracked
    object: with the imports in view each one during the tests cost tenfold. What the tests create
    is collected as before, and pytest's final sweeps for unraisable exceptions still see it. The
    garbage of the imports themselves is collected first."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Collect the garbage of the last tests until a collection finds none, then freeze what is
    left (pytest's reports, the session's fixtures): pytest's five closing sweeps for
    unraisable exceptions (which run later) then walk nothing instead of the whole heap five
    times. What these collections free reports its unraisable exceptions to pytest's hook all the
    same. If five collections in a row still find garbage, nothing is frozen."""
    for _ in range(5):
        if not gc.collect():
            gc.freeze()
            return


TLS_CONTEXT = ssl.create_default_context()
"""One TLS context for the clients tests make: a new httpx or SDK client loads the CA bundle anew
(~30 ms of CPU each) unless it is given one, and every server of the tests is plain HTTP anyway."""

SDK_CLIENTS: list[Any] = []


def sdk_client(client: Any) -> Any:
    """Register an official SDK client to be closed after the test (an unclosed client's pooled
    sockets would be collected later, in another test, as an unraisable ResourceWarning)."""
    SDK_CLIENTS.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_sdk_clients() -> Iterator[None]:
    yield
    while SDK_CLIENTS:
        SDK_CLIENTS.pop().close()


FASTAPI_CALLABLE_CACHES = [
    value
    for value in vars(fastapi_dependency_models).values()
    if callable(getattr(value, "cache_clear", None))
]
"""FastAPI's module-level LRU caches of what kind of callable each endpoint and dependency is
(4096 entries each). They hold the callables, and through their closures every app a test built:
its Gateway, registry, store and clients, a few hundred apps at once, all walked by each full
garbage collection."""


@pytest.fixture(autouse=True)
def _forget_finished_apps() -> Iterator[None]:
    """Let the apps of a finished test be freed: empty FastAPI's callable caches after it."""
    yield
    for cache in FASTAPI_CALLABLE_CACHES:
        cache.cache_clear()


def require_service(name: str, available: bool, why: str = "") -> None:
    """Skip a test whose service is missing, unless CI demands services (then fail)."""
    if available:
        return
    message = f"{name} is not available{': ' + why if why else ''}"
    if os.environ.get("MIRRORGATE_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " (MIRRORGATE_REQUIRE_SERVICES=1)")
    pytest.skip(message)


def wait_until(predicate: Callable[[], Any], timeout_s: float = 15.0, what: str = "") -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout_s`.

    The first polls come quickly (what is nearly done is seen at once), later ones every 20 ms
    (a long wait does not take the CPU from what it waits for)."""
    deadline = time.monotonic() + timeout_s
    pause = 0.001
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or predicate}")
        time.sleep(pause)
        pause = min(pause * 2, 0.02)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def _pg_schemas() -> Iterator[list[str]]:
    """The schemas `pg_schema` made this session, dropped together at its end (one statement
    instead of one per test)."""
    made: list[str] = []
    yield made
    if made:
        engine = sa.create_engine(PG_ADMIN_URL)
        with engine.begin() as conn:
            names = ", ".join(f'"{schema}"' for schema in made)
            conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {names} CASCADE"))
        engine.dispose()


@pytest.fixture
def pg_schema(_pg_schemas: list[str]) -> tuple[str, str]:
    """A fresh PostgreSQL schema on the machine's server: (url, schema); dropped at the end of
    the session. Its connections commit without waiting for the WAL flush
    (`synchronous_commit=off`): what is committed is visible at once all the same, only a crash
    of the server could lose it, and migrating a schema takes half the time."""
    return _new_pg_schema(_pg_schemas)


def _new_pg_schema(made: list[str]) -> tuple[str, str]:
    require_service("PostgreSQL at 127.0.0.1:5432", _port_open("127.0.0.1", 5432))
    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(PG_ADMIN_URL)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()
    made.append(schema)
    options = f"-csearch_path%3D{schema}%20-csynchronous_commit%3Doff"
    return f"{PG_ADMIN_URL}?options={options}", schema


@pytest.fixture(scope="session")
def _pg_migrated() -> Iterator[dict[str, Any]]:
    """The session's migrated PostgreSQL schema, made on first use: its url, schema, tables and
    the engine that empties it (replaced when a test left it unusable)."""
    migrated: dict[str, Any] = {}
    yield migrated
    if "engine" in migrated:
        migrated["engine"].dispose()


PG_LOCK_TIMEOUT_MS = 5000
"""How long emptying the migrated schema waits for a lock something still holds before a new
schema is migrated instead."""


@pytest.fixture
def pg_migrated_schema(_pg_schemas: list[str], _pg_migrated: dict[str, Any]) -> tuple[str, str]:
    """A PostgreSQL schema at the newest version with every table empty: (url, schema).

    Migrating a new schema costs ~85 statements (0.25-0.7 s of PostgreSQL's time); instead the
    session migrates one and each test gets it emptied (every row of every table but
    `schema_version` deleted, every sequence set back to its start), so no row, id or sequence
    value of an earlier test is seen. If its tables or its version are not the migrated ones any
    more, or a lock held elsewhere keeps it from being emptied, a new schema is migrated. Tests of
    the migrations themselves take `pg_schema` (empty)."""
    if _pg_migrated and _emptied(_pg_migrated["engine"], _pg_migrated["tables"]):
        return _pg_migrated["url"], _pg_migrated["schema"]
    if "engine" in _pg_migrated:
        _pg_migrated.pop("engine").dispose()
    url, schema = _new_pg_schema(_pg_schemas)
    store = Store(url)
    try:
        store.migrate()
    finally:
        store.close()
    engine = sa.create_engine(url, pool_size=1, pool_pre_ping=True)
    _pg_migrated.update(url=url, schema=schema, engine=engine, tables=_pg_tables(engine))
    return url, schema


_PG_TABLES = sa.text(
    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
    "AND tablename <> 'schema_version' ORDER BY 1"
)
_PG_RESTART_SEQUENCES = sa.text(
    "SELECT setval(format('%I', sequencename)::regclass, start_value, false) "
    "FROM pg_sequences WHERE schemaname = current_schema()"
)


def _pg_tables(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return [str(row[0]) for row in conn.execute(_PG_TABLES)]


def _emptied(engine: sa.Engine, tables: list[str]) -> bool:
    """Empty every table of the migrated schema `engine` reaches, in one transaction; False if
    it is not as migrated (its tables or its version changed) or a lock kept it from being
    emptied.

    `DELETE` of the few rows a test leaves, not `TRUNCATE`: truncating gives every table and
    index a new file, ~0.3 s of PostgreSQL's time per test; the sequences are set back to their
    start as `TRUNCATE ... RESTART IDENTITY` would."""
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"SET LOCAL lock_timeout = {PG_LOCK_TIMEOUT_MS}"))
            if [str(row[0]) for row in conn.execute(_PG_TABLES)] != tables:
                return False
            version = conn.execute(sa.text("SELECT max(version) FROM schema_version"))
            if version.scalar() != head_version():
                return False
            conn.execute(sa.text("; ".join(f'DELETE FROM "{name}"' for name in tables)))
            conn.execute(_PG_RESTART_SEQUENCES)
    except sa.exc.DBAPIError:
        return False
    return True


BEHAVIOR: dict[str, Any] = {
    "default": {"answer": {"type": "echo"}},
    "models": {
        "rule-follower": {
            "answer": {
                "type": "regex_from_system",
                "pattern": r"max_weight\s*=\s*(\d+)",
                "template": '{"max_weight": {1}}',
            }
        },
        "stale": {"answer": {"type": "fixed", "text": '{"max_weight": 100}'}},
        "judge": {
            "answer": {"type": "fixed", "text": '{"score_a": 8, "score_b": 5, "reason": "A"}'}
        },
        "no-usage": {"usage": False},
        "broken": {"error": {"status": 503, "rate": 1.0}},
        "garbage": {"garbage": {"rate": 1.0}},
        "reset": {"reset": {"rate": 1.0}},
        "stall": {"timeout": {"rate": 1.0}},
        "slow-stream": {
            "ttft_ms": 20,
            "tokens_per_second": 2000,
            "answer": {"type": "echo", "answer_tokens": 200},
        },
        "mid-disconnect": {"disconnect_mid_stream": {"rate": 1.0, "after_chunks": 2}},
        "bad-chunk": {"malformed_chunk": {"rate": 1.0, "after_chunks": 2}},
    },
}


@pytest.fixture(scope="session")
def upstream() -> Iterator[MockUpstreamServer]:
    """One mock upstream for the session, with every scripted model of BEHAVIOR."""
    with MockUpstreamServer(parse_behavior(BEHAVIOR)) as server:
        yield server


STALL_TIMEOUT_S = 0.05
"""Upstream timeout of the models that never answer (`stall`): a stalled upstream proves the
same 504 after 50 ms as after the 2 s every other model gets (connecting has its own timeout)."""

_DB_PLACEHOLDER = "sqlite:///db-of-this-test.db"
_CONFIGS: dict[bytes, MirrorgateConfig] = {}


def gateway_config(
    upstream_url: str,
    db_url: str,
    extra: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    **store: Any,
) -> MirrorgateConfig:
    """A config with one model per scripted mock model and one route per model.

    The recorder flushes every 10 ms (the shortest the config allows) so that tests waiting for
    a record do not wait for the default 200 ms timer; `store` or `extra` may set it back.
    Parsed once per distinct document, with its keys sorted as YAML would write them (models and
    routes in name order), by `parse_document`: the same checks, without the ~17 ms of writing
    and reading it as YAML. The same document for another database is a copy of the parsed
    config with only `store.url` replaced.
    """
    models: dict[str, Any] = {}
    routes: dict[str, Any] = {}
    names = ["echo", *BEHAVIOR["models"]]
    for name in names:
        timeout_s = STALL_TIMEOUT_S if name == "stall" else 2
        models[name] = {
            "provider": "openai",
            "base_url": upstream_url + "/v1",
            "model": name,
            "timeout_s": timeout_s,
            "price": {"input_per_mtok": 1.0, "output_per_mtok": 4.0, "cached_input_per_mtok": 0.5},
        }
        models[f"{name}-claude"] = {
            "provider": "anthropic",
            "base_url": upstream_url,
            "model": name,
            "timeout_s": timeout_s,
            "price": {"input_per_mtok": 3.0, "output_per_mtok": 15.0},
        }
        routes[name] = {"primary": name}
        routes[f"{name}-claude"] = {"primary": f"{name}-claude"}
    doc: dict[str, Any] = {
        "server": {"port": 0},
        "store": {"url": _DB_PLACEHOLDER, "bodies": "full", "flush_interval_ms": 10, **store},
        "models": models,
        "routes": routes,
    }
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    env = env or {}
    cache_key = orjson.dumps([doc, env], option=orjson.OPT_SORT_KEYS)
    config = _CONFIGS.get(cache_key)
    if config is None:
        config = _CONFIGS[cache_key] = parse_document(orjson.loads(cache_key)[0], env=env)
    if config.store.url != _DB_PLACEHOLDER:
        return config
    return config.model_copy(update={"store": config.store.model_copy(update={"url": db_url})})


class InProcessGateway:
    """A `Gateway` served in process, without a socket.

    Its ASGI app runs on an event loop thread of its own with its lifespan (as under uvicorn,
    see tests/asgi_driver.py); clients reach it through an httpx transport: `client()`,
    `async_client()`, `http` (one client for the whole test), or any SDK given
    `http_client=gw.client()`. `url` is a base URL only those clients understand. `stop()`
    drains and shuts down the way SIGTERM would; it is idempotent. The official SDKs take the
    `httpx2` clients of `sdk_http()` and `sdk_async_http()` (httpx2 is the SDKs' own httpx).
    """

    url = "http://mirrorgate.test"

    def __init__(self, config: MirrorgateConfig, **gateway_kwargs: Any) -> None:
        self.gateway = Gateway(config, **gateway_kwargs)
        self.app_thread = AppThread(self.gateway.app, name="mirrorgate-gateway")
        self._clients: list[httpx.Client | httpx2.Client] = []

    def start(self) -> InProcessGateway:
        self.app_thread.start()
        return self

    @property
    def loop(self) -> Any:
        """The event loop the gateway runs on."""
        return self.app_thread.loop

    def client(self, **kwargs: Any) -> httpx.Client:
        """A new synchronous client of this gateway (closed when the gateway stops)."""
        kwargs.setdefault("base_url", self.url)
        client = httpx.Client(transport=sync_transport(self.app_thread), **kwargs)
        self._clients.append(client)
        return client

    def async_client(self, **kwargs: Any) -> httpx.AsyncClient:
        """A new async client of this gateway, for the caller's event loop to use and close."""
        kwargs.setdefault("base_url", self.url)
        return httpx.AsyncClient(transport=async_transport(self.app_thread), **kwargs)

    def sdk_http(self) -> httpx2.Client:
        """An `http_client=` for an official SDK client (closed with it, or when the gateway
        stops)."""
        client = httpx2.Client(transport=sync_transport(self.app_thread, httpx2))
        self._clients.append(client)
        return client

    def sdk_async_http(self) -> httpx2.AsyncClient:
        """An `http_client=` for an official async SDK client, closed with it."""
        return httpx2.AsyncClient(transport=async_transport(self.app_thread, httpx2))

    @functools.cached_property
    def http(self) -> httpx.Client:
        """A client for the whole test: `gw.http.post("/v1/chat/completions", json=...)`."""
        return self.client()

    def status_without_body(
        self, method: str, path: str, headers: list[tuple[bytes, bytes]]
    ) -> int:
        """The status answered to a request whose body never comes (see tests/asgi_driver.py)."""
        return status_without_body(self.app_thread, method, httpx.URL(self.url + path), headers)

    def stop(self) -> None:
        while self._clients:
            self._clients.pop().close()
        self.app_thread.stop(self.gateway.config.server.drain_timeout_s)


@pytest.fixture
def quick_rollout_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rollout controller wakes every 20 ms instead of every 0.5 s, so that a canary is
    judged as soon as its `analysis.interval_s` is due: the tests' short intervals then take as
    long as they say, not the next multiple of half a second."""
    monkeypatch.setattr("proxy.rollout.controller.TICK_S", 0.02)


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated to the newest schema, made once per session: gateways start on
    a copy of it rather than migrating a new file step by step (their start still runs the
    migrations, which find nothing to do; the migrations are tested in tests/proxy/store)."""
    path = tmp_path_factory.mktemp("migrated") / "migrated.db"
    store = Store(f"sqlite:///{path}")
    store.migrate()
    store.close()
    return path


def seed_sqlite(db_url: str, migrated: Path) -> None:
    """A SQLite database that does not exist yet starts as a copy of the migrated one (pass the
    `migrated_sqlite` fixture): its `migrate()` then finds nothing to do, in ~10 ms instead of
    the ~60-170 ms of every step on a new file. Tests of the migrations themselves start empty."""
    if db_url.startswith("sqlite:///"):
        path = Path(db_url.removeprefix("sqlite:///"))
        if not path.exists():
            shutil.copyfile(migrated, path)


def sqlite_plans(
    engine: sa.Engine, call: Callable[[], Returned], reading: str
) -> tuple[Returned, list[list[str]]]:
    """What `call` returns, and SQLite's EXPLAIN QUERY PLAN of each statement it runs on
    `engine` that contains `reading` (a table's `FROM ...`, say): one list of plan lines per
    statement, in the order they ran."""
    statements: list[tuple[str, Any]] = []

    def keep(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if reading in statement:
            statements.append((statement, params))

    sa.event.listen(engine, "before_cursor_execute", keep)
    try:
        returned = call()
    finally:
        sa.event.remove(engine, "before_cursor_execute", keep)
    with engine.connect() as conn:
        return returned, [
            [str(row[-1]) for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
            for sql, params in statements
        ]


@pytest.fixture
def start_gateway(
    upstream: MockUpstreamServer, tmp_path: Path, migrated_sqlite: Path
) -> Iterator[Callable[..., InProcessGateway]]:
    """Start gateways in process in front of the session's mock upstream; each is stopped after
    the test. `start(db_url=None, extra=None, **gateway_kwargs)`."""
    started: list[InProcessGateway] = []

    def start(
        db_url: str | None = None, extra: dict[str, Any] | None = None, **kwargs: Any
    ) -> InProcessGateway:
        url = db_url or f"sqlite:///{tmp_path / 'gw.db'}"
        seed_sqlite(url, migrated_sqlite)
        config = gateway_config(upstream.url, url, extra, kwargs.get("env"))
        kwargs.setdefault("registry", CollectorRegistry())
        gateway = InProcessGateway(config, **kwargs)
        started.append(gateway)
        return gateway.start()

    yield start
    for gateway in reversed(started):
        gateway.stop()


@pytest.fixture
def start_gateway_server(
    upstream: MockUpstreamServer, tmp_path: Path, migrated_sqlite: Path
) -> Iterator[Callable[..., GatewayServer]]:
    """Like `start_gateway`, but each gateway is a real uvicorn server on 127.0.0.1 (`gw.url`),
    for tests about sockets and for clients that only take a URL."""
    started: list[GatewayServer] = []

    def start(
        db_url: str | None = None, extra: dict[str, Any] | None = None, **kwargs: Any
    ) -> GatewayServer:
        url = db_url or f"sqlite:///{tmp_path / 'gw.db'}"
        seed_sqlite(url, migrated_sqlite)
        config = gateway_config(upstream.url, url, extra, kwargs.get("env"))
        kwargs.setdefault("registry", CollectorRegistry())
        server = GatewayServer(config, **kwargs).__enter__()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()
