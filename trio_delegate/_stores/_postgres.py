"""A durable store shared by a fleet of hosts, in PostgreSQL (contract §12, §16).

Design:

* psycopg 3's synchronous API on Trio worker threads (its asyncio flavour
  cannot run under Trio), with a ``psycopg-pool`` connection pool; calls on
  a thread cannot be cancelled, so every one is bounded instead: a connect
  timeout, a ``statement_timeout`` and a TCP user timeout;
* one transaction per ``write`` (the runtime batches pending records:
  group commit), committed before it returns;
* records as JSON *text* (``jsonb`` rejects ``\\u0000``), head and state
  apart as in the SQLite store (see ``_codec``);
* a versioned schema in its own PostgreSQL schema (``trio_delegate`` unless
  told otherwise), created and migrated under an advisory lock; a schema of
  something else, or of a newer version, is refused and left untouched;
* liveness: each attached runtime holds a session advisory lock on a
  connection of its own (the server drops it the moment the process dies)
  and a lease row that :meth:`PostgresStore.sweep` renews. A runtime is gone
  when its lock is free or its lease has run out by the database's clock;
* changes are numbered from a sequence while holding a transaction advisory
  lock, so numbers become visible in order and a reader never skips one;
  each committing transaction sends a ``NOTIFY`` carrying its last number,
  which :meth:`PostgresStore.wait_changes` waits for without a thread.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import trio

from .._checks import check_int, check_seconds, describe
from .._errors import InvalidArgumentsError, StoreError
from .._status import RunStatus
from .._threads import run_sync
from ._base import RecordReader, ThreadedStore, pruned_before
from ._codec import (
    EncodedRecord,
    LiveHeads,
    change_batch,
    decode_full_row,
    decode_row,
    encode_record,
    encode_state,
    fold,
    requests_after,
    status_of,
    stored_usage,
    with_head,
)
from ._protocol import (
    DEFAULT_MAX_ROWS,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_RETENTION_SECONDS,
    ChangeBatch,
    RunRecord,
    StoredRun,
    StoreSnapshot,
    check_cursor,
    check_poll_interval,
    check_runtime_id,
    check_wait_timeout,
    interrupted,
    is_run_id,
    is_runtime_id,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool

__all__ = ["SCHEMA_VERSION", "PostgresReader", "PostgresStore", "mask_dsn"]

_APPLICATION: Final = "trio_delegate"
SCHEMA_VERSION: Final = 4
_SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,47}")
_PRUNE_EVERY: Final = 512
#: Notified change numbers are kept per writer for at most this many writers.
_NOTIFIED_WRITERS: Final = 64
_INSTALL_HINT: Final = "install the postgres extra: pip install 'trio-delegate[postgres]'"

T = TypeVar("T")


def _psycopg() -> Any:
    """The psycopg modules, imported on first use (they are an optional extra)."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreError(f"PostgresStore needs psycopg ({exc}): {_INSTALL_HINT}") from exc
    return psycopg, psycopg_pool


# -- DSNs: the password never shows ---------------------------------------------------

_URI_PASSWORD: Final = re.compile(r"^(postgres(?:ql)?://[^:/@?#]*):[^@/?#]*@")
_QUERY_PASSWORD: Final = re.compile(r"([?&]password=)[^&#]*")
_KEYWORD_PASSWORD: Final = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def is_postgres_dsn(text: str) -> bool:
    """Whether *text* is a PostgreSQL URI (``postgresql://`` or ``postgres://``)."""
    return text.startswith(("postgresql://", "postgres://"))


def mask_dsn(dsn: str) -> str:
    """*dsn* with any password in it replaced by ``***``, for messages and titles."""
    if is_postgres_dsn(dsn):
        return _QUERY_PASSWORD.sub(r"\1***", _URI_PASSWORD.sub(r"\1:***@", dsn))
    return _KEYWORD_PASSWORD.sub(r"\1***", dsn)


def _column(text: str) -> str:
    # PostgreSQL text cannot hold NUL: columns used to filter and sort (the
    # JSON documents never contain one) keep text escaped, reversibly.
    if "\x00" in text or "\\" in text:
        return text.replace("\\", "\\\\").replace("\x00", "\\0")
    return text


def _uncolumn(text: str) -> str:
    if "\\" not in text:
        return text
    return re.sub(r"\\(\\|0)", lambda m: "\\" if m.group(1) == "\\" else "\x00", text)


def _optional_column(text: str | None) -> str | None:
    return None if text is None else _column(text)


# -- the SQL --------------------------------------------------------------------------


@final
class _Sql:
    """The statements of one store schema, composed once."""

    def __init__(self, schema: str) -> None:
        pg, _ = _psycopg()
        pgsql = pg.sql
        self.schema = schema
        name = pgsql.Identifier(schema)
        self.name = name
        self.channel = f"{schema}_changes"
        #: Serialises every change (and the reading of the current position).
        self.change_key = f"trio_delegate.changes:{schema}"
        self.migrate_key = f"trio_delegate.migrate:{schema}"

        def q(text: str) -> sql.Composed:
            composed: sql.Composed = pgsql.SQL(text).format(s=name)
            return composed

        self.columns = "record, state, cancel_requested, observed, answer_requests"
        self.meta = q("SELECT key, value FROM {s}.meta")
        self.lock_changes = q("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))")
        self.lock_changes_shared = q("SELECT pg_advisory_xact_lock_shared(hashtextextended(%s, 0))")
        self.position = q("SELECT last_value, is_called FROM {s}.changes")
        # The payload is the transaction's last change number, followed by the
        # runtime whose own writes made every change of it, if one did.
        self.notify = q(
            "SELECT pg_notify(%s, (SELECT last_value FROM {s}.changes)::text || %s::text)"
        )
        # One statement per batch, its rows as arrays: PostgreSQL plans and
        # runs it once instead of once per record (a batch holds each run once).
        # The arrays go in binary (%b): as text, every quote of the JSON would
        # be escaped on the way.
        self.upsert = q(
            """
            INSERT INTO {s}.runs (run_id, runtime_id, owner, subagent, status, admitted_at,
                                  ended_at, record, state, seq, cancel_requested, observed,
                                  writer)
            SELECT u.run_id, u.runtime_id, u.owner, u.subagent, u.status, u.admitted_at,
                   u.ended_at, u.record, u.state, nextval('{s}.changes'), u.flag_c, u.flag_o,
                   u.writer
            FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],
                        %b::text[], %b::text[], %b::text[], %b::bool[], %b::bool[], %b::text[])
                AS u(run_id, runtime_id, owner, subagent, status, admitted_at, ended_at,
                     record, state, flag_c, flag_o, writer)
            ON CONFLICT (run_id) DO UPDATE SET
                runtime_id = excluded.runtime_id,
                owner = excluded.owner,
                subagent = excluded.subagent,
                status = excluded.status,
                admitted_at = excluded.admitted_at,
                ended_at = excluded.ended_at,
                record = excluded.record,
                state = excluded.state,
                seq = excluded.seq,
                cancel_requested = runs.cancel_requested OR excluded.cancel_requested,
                observed = runs.observed OR excluded.observed,
                writer = CASE WHEN (runs.cancel_requested AND NOT excluded.cancel_requested)
                                OR (runs.observed AND NOT excluded.observed)
                              THEN NULL ELSE excluded.writer END
            WHERE runs.status IN ('pending', 'running')
            RETURNING run_id
            """
        )
        # The stored states of runs whose ending an upsert did not write.
        self.stored_states = q("SELECT run_id, state FROM {s}.runs WHERE run_id = ANY(%b::text[])")
        self.update_state = q(
            """
            UPDATE {s}.runs r SET status = u.status, ended_at = u.ended_at, state = u.state,
                seq = nextval('{s}.changes'),
                cancel_requested = r.cancel_requested OR u.flag_c,
                observed = r.observed OR u.flag_o,
                writer = CASE WHEN (r.cancel_requested AND NOT u.flag_c)
                                OR (r.observed AND NOT u.flag_o)
                              THEN NULL ELSE u.writer END
            FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::bool[], %b::bool[],
                        %b::text[])
                AS u(run_id, status, ended_at, state, flag_c, flag_o, writer)
            WHERE r.run_id = u.run_id AND r.status IN ('pending', 'running')
            RETURNING r.run_id
            """
        )
        self.get = q(f"SELECT {self.columns} FROM {{s}}.runs WHERE run_id = %s")
        # What ``trio-delegate runs`` reads: the record and its flags (not the
        # answers left for it), and the run id column, which names a damaged
        # row whose record does not.
        self.read_columns = "record, state, cancel_requested, observed, run_id"
        self.read_get = q(f"SELECT {self.read_columns} FROM {{s}}.runs WHERE run_id = %s")
        self.read_changes = q(
            f"SELECT seq, {self.read_columns} FROM {{s}}.runs WHERE seq > %s ORDER BY seq"
        )
        # What a usage summary reads of a row (``PostgresReader.usage_rows``):
        # the usage is the state's last member (the codec writes it there), so
        # it is read off the state's tail, never the whole document.
        usage_columns = (
            "pos, run_id, owner, subagent, status, admitted_at, "
            "substring(right(state, 400) from '\"usage\":(\\x7b[^\\x7b\\x7d]*\\x7d)\\x7d$')"
        )
        self.usage_rows = q(
            f"SELECT {usage_columns} FROM {{s}}.runs WHERE pos > %s ORDER BY pos LIMIT %s"
        )
        self.usage_rows_of = q(
            f"SELECT {usage_columns} FROM {{s}}.runs WHERE pos > %s"
            " AND (owner = %s OR starts_with(owner, %s)) ORDER BY pos LIMIT %s"
        )
        self.usage_row = q(f"SELECT {usage_columns} FROM {{s}}.runs WHERE run_id = %s")
        # Ids only. Not a range of the index: under the database's collation
        # (da_DK sorts "aa" after "z") ids that start alike need not be neighbours.
        self.ids_starting = q(
            "SELECT run_id FROM {s}.runs WHERE starts_with(run_id, %s) ORDER BY run_id LIMIT %s"
        )
        self.changes = q(f"SELECT seq, {self.columns} FROM {{s}}.runs WHERE seq > %s ORDER BY seq")
        self.foreign_changes = q(
            f"SELECT seq, {self.columns} FROM {{s}}.runs "
            "WHERE seq > %s AND seq <= %s AND writer IS DISTINCT FROM %s ORDER BY seq"
        )
        # The usage a terminal record keeps (contract §20) is the last key of its
        # state document when there is one, a flat object: read from its tail
        # (braces written as \x7b and \x7d, which SQL.format would take).
        self.terminal = q(
            "SELECT run_id, owner, subagent, status, "
            "substring(right(state, 400) from '\"usage\":(\\x7b[^\\x7b\\x7d]*\\x7d)\\x7d$') "
            "FROM {s}.runs WHERE status NOT IN ('pending', 'running') ORDER BY pos"
        )
        # A runtime is gone when no session holds its advisory lock, or its
        # lease has run out by the database's clock (or it has no row at all).
        gone = """
            t.runtime_id IS NULL OR t.lease_until < clock_timestamp() OR NOT EXISTS (
                SELECT 1 FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                  AND l.database = (SELECT oid FROM pg_database
                                    WHERE datname = current_database())
                  AND l.classid::bigint = ((t.lock_key >> 32) & 4294967295)
                  AND l.objid::bigint = (t.lock_key & 4294967295))
        """
        self.gone_runtimes = q(
            f"""
            SELECT DISTINCT r.runtime_id FROM {{s}}.runs r
            LEFT JOIN {{s}}.runtimes t ON t.runtime_id = r.runtime_id
            WHERE r.status IN ('pending', 'running') AND ({gone})
            """
        )
        self.gone_runs = q(
            f"""
            SELECT r.record, r.state, r.cancel_requested, r.observed FROM {{s}}.runs r
            LEFT JOIN {{s}}.runtimes t ON t.runtime_id = r.runtime_id
            WHERE r.status IN ('pending', 'running') AND r.runtime_id = ANY(%s) AND ({gone})
            ORDER BY r.pos
            FOR UPDATE OF r
            """
        )
        self.forget_gone = q(
            f"""
            DELETE FROM {{s}}.runtimes t WHERE ({gone}) AND NOT EXISTS (
                SELECT 1 FROM {{s}}.runs r
                WHERE r.runtime_id = t.runtime_id AND r.status IN ('pending', 'running'))
            """
        )
        self.lease = q(
            """
            INSERT INTO {s}.runtimes (runtime_id, lock_key, lease_until, host, pid)
            VALUES (%s, hashtextextended(%s, 0),
                    clock_timestamp() + make_interval(secs => %s), %s, %s)
            ON CONFLICT (runtime_id) DO UPDATE SET lease_until = excluded.lease_until
            """
        )
        self.unregister = q("DELETE FROM {s}.runtimes WHERE runtime_id = %s")
        self.prune_age = q(
            "DELETE FROM {s}.runs WHERE status NOT IN ('pending', 'running') AND ended_at < %s"
        )
        self.prune_rows = q(
            """
            DELETE FROM {s}.runs WHERE pos IN (
                SELECT pos FROM {s}.runs WHERE status NOT IN ('pending', 'running')
                ORDER BY pos DESC OFFSET %s)
            """
        )
        self.flag = {
            flag: q(
                f"UPDATE {{s}}.runs SET {flag} = true, seq = nextval('{{s}}.changes'), "
                # The run's own runtime made this change (an observation of
                # its own run); anyone else's is news to it.
                "writer = CASE WHEN runtime_id = %(by)s THEN %(by)s END "
                f"WHERE run_id = %(run_id)s AND NOT {flag}{live}"
            )
            for flag, live in (
                ("cancel_requested", " AND status IN ('pending', 'running')"),
                ("observed", ""),
            )
        }
        self.create = [
            q("CREATE SCHEMA IF NOT EXISTS {s}"),
            q("CREATE TABLE {s}.meta (key text PRIMARY KEY, value text NOT NULL)"),
            q("CREATE SEQUENCE {s}.changes AS bigint"),
            q(
                """
                CREATE TABLE {s}.runs (
                    pos              bigint GENERATED ALWAYS AS IDENTITY,
                    run_id           text PRIMARY KEY,
                    runtime_id       text NOT NULL,
                    owner            text NOT NULL,
                    subagent         text NOT NULL,
                    status           text NOT NULL,
                    admitted_at      text NOT NULL,
                    ended_at         text,
                    record           text NOT NULL,
                    state            text NOT NULL,
                    seq              bigint NOT NULL,
                    cancel_requested boolean NOT NULL DEFAULT false,
                    observed         boolean NOT NULL DEFAULT false
                )
                """
            ),
            q("CREATE INDEX runs_by_pos ON {s}.runs (pos)"),
            q("CREATE INDEX runs_by_owner ON {s}.runs (owner, pos)"),
            q("CREATE INDEX runs_by_seq ON {s}.runs (seq)"),
            q(
                "CREATE INDEX runs_live ON {s}.runs (runtime_id) "
                "WHERE status IN ('pending', 'running')"
            ),
            q(
                """
                CREATE TABLE {s}.runtimes (
                    runtime_id  text PRIMARY KEY,
                    lock_key    bigint NOT NULL,
                    lease_until timestamptz NOT NULL,
                    attached_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                    host        text,
                    pid         integer
                )
                """
            ),
            q(
                "INSERT INTO {s}.meta VALUES ('application', 'trio_delegate'), "
                "('schema_version', '1')"
            ),
        ]
        #: migrations[n] brings a store from version n to n + 1.
        self.migrations = {
            # ``writer``: the runtime whose own write made a row's latest
            # change; NULL where anything else made it (a flag, an
            # interruption, a write over a flag it had not seen).
            1: [q("ALTER TABLE {s}.runs ADD COLUMN writer text")],
            # A continuation's head may name the run it continues instead of
            # holding its conversation again: nothing to rewrite, but an older
            # trio_delegate must not read such a history as empty.
            2: [],
            # The answers other runtimes left for a live run's open questions
            # (contract §19); questions and progress live in the state
            # document, which an older trio_delegate would read without them.
            3: [q("ALTER TABLE {s}.runs ADD COLUMN answer_requests text")],
        }
        # Answers left for a run that still has questions open are news for
        # its own runtime, whoever wrote last (see post_answer).
        self.asking = q(
            "UPDATE {s}.runs SET writer = NULL "
            "WHERE run_id = ANY(%b::text[]) AND answer_requests IS NOT NULL"
        )
        self.requests = q(
            "SELECT status, state, answer_requests FROM {s}.runs WHERE run_id = %s FOR UPDATE"
        )
        self.post = q(
            "UPDATE {s}.runs SET answer_requests = %s, seq = nextval('{s}.changes'), "
            "writer = NULL WHERE run_id = %s"
        )
        self.set_version = q("UPDATE {s}.meta SET value = %s WHERE key = 'schema_version'")

    def listing(
        self, status: RunStatus | None, owner: str | None, limit: int, columns: str | None = None
    ) -> tuple[sql.Composed, list[Any]]:
        pg, _ = _psycopg()
        clauses: list[str] = []
        params: list[Any] = []
        if status is not None:
            clauses.append("status = %s")
            params.append(status.value)
        if owner is not None:
            clauses.append("owner = %s")
            params.append(_column(owner))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        params.append(limit)
        query = pg.sql.SQL(
            f"SELECT {columns or self.columns} FROM {{s}}.runs{where} ORDER BY pos DESC LIMIT %s"
        ).format(s=self.name)
        return query, params


def _schema_version(conn: psycopg.Connection[Any], statements: _Sql, where: str) -> int:
    """The version of the store schema; 0 when it does not exist or is empty.

    Raises:
        StoreError: the schema belongs to something else, or to a newer version.
    """
    schema = statements.schema
    tables = {
        row[0]
        for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            [schema],
        ).fetchall()
    }
    if not tables:
        others = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s",
            [schema],
        ).fetchone()
        if others is not None and others[0]:
            raise _foreign(where, schema, {"(sequences, views or other objects)"})
        return 0
    meta: dict[str, str] = {}
    if "meta" in tables:
        meta = dict(conn.execute(statements.meta).fetchall())
    if meta.get("application") != _APPLICATION:
        raise _foreign(where, schema, tables)
    try:
        version = int(meta["schema_version"])
    except (KeyError, ValueError, TypeError):
        raise StoreError(
            f"the store {where} has no readable schema version; it was left untouched: "
            "restore it from a backup or use another schema",
            path=where,
        ) from None
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the store {where} has schema version {version}, written by a newer "
            f"trio_delegate (this one reads up to {SCHEMA_VERSION}): upgrade trio_delegate, or "
            "use another schema",
            path=where,
        )
    return version


def _position(conn: psycopg.Connection[Any], statements: _Sql) -> int:
    """The number of the latest change committed to the store."""
    with conn.transaction():
        # No change is being committed while this is held: every number up
        # to the one read is visible, none is still on its way.
        conn.execute(statements.lock_changes_shared, [statements.change_key])
        row = conn.execute(statements.position).fetchone()
    if row is None or not row[1]:
        return 0
    return int(row[0])


def _check_exists(version: int, where: str, dsn: str) -> None:
    if version == 0:
        raise StoreError(f"there is no trio_delegate store at {where}", path=mask_dsn(dsn))


def _foreign(where: str, schema: str, tables: set[str]) -> StoreError:
    return StoreError(
        f"the store {where}: the PostgreSQL schema {schema!r} belongs to something else "
        f"(it holds {', '.join(sorted(tables))}), not to trio_delegate; it was left "
        "untouched: choose another schema (PostgresStore(..., schema=...))",
        path=where,
    )


@final
class PostgresStore(ThreadedStore):
    """Run records in PostgreSQL, shared by every runtime of a fleet of hosts.

    Args:
        dsn: a libpq connection string or URI (``postgresql://user@host/db``).
            Leave the password out of it: libpq reads ``PGPASSWORD``, a
            password file or a service file. It is never shown: messages and
            ``repr`` mask it.
        lease_seconds: how long a runtime stays alive in the others' eyes
            after its last successful :meth:`sweep`. A runtime that cannot
            renew it must stop its live runs before it runs out; once it has,
            other runtimes mark those runs interrupted.
        schema: the PostgreSQL schema holding the store's tables (created if
            missing); several stores can share one database under different
            schemas.
        poll_interval: how often (seconds, at most 1) a runtime renews its
            lease and looks for changes when no notification came.
        pool_size: at most this many pooled connections (besides one per
            attached runtime, holding its lock, and one listening).
        connect_timeout: seconds to wait for a connection.
        statement_timeout: seconds any one statement may take on the server.
        retention_seconds: terminal runs that ended longer ago (wall clock)
            are pruned; ``None`` keeps them by age.
        max_rows: at most this many terminal runs are kept (oldest pruned
            first); ``None`` for no bound. Live runs are never pruned.

    Raises:
        InvalidArgumentsError: a malformed argument.
        StoreError: psycopg is not installed.
    """

    __slots__ = (
        "_changes_since_cleanup",
        "_conninfo",
        "_heads",
        "_limiter",
        "_listener",
        "_listening",
        "_locks",
        "_notified",
        "_opening",
        "_password",
        "_pool",
        "_sql",
        "_where",
        "_written",
        "connect_timeout",
        "dsn",
        "lease_seconds",
        "max_rows",
        "poll_interval",
        "pool_size",
        "retention_seconds",
        "schema",
        "statement_timeout",
    )

    def __init__(
        self,
        dsn: str,
        *,
        lease_seconds: float = 30.0,
        schema: str = "trio_delegate",
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        pool_size: int = 4,
        connect_timeout: float = 5.0,
        statement_timeout: float = 10.0,
        retention_seconds: float | None = DEFAULT_RETENTION_SECONDS,
        max_rows: int | None = DEFAULT_MAX_ROWS,
    ) -> None:
        pg, _ = _psycopg()
        if not isinstance(dsn, str):
            raise InvalidArgumentsError(
                f"PostgresStore.dsn must be a connection string, got {describe(dsn)}"
            )
        try:
            params = pg.conninfo.conninfo_to_dict(dsn)
        except pg.ProgrammingError as exc:
            raise InvalidArgumentsError(
                f"PostgresStore.dsn is not a valid connection string ({mask_dsn(str(exc))}): "
                "write e.g. postgresql://user@host:5432/dbname"
            ) from None
        if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
            raise InvalidArgumentsError(
                f"PostgresStore.schema must be a lowercase name of at most 48 letters, digits "
                f"and underscores, starting with a letter or underscore, got {describe(schema)}"
            )
        self.poll_interval = check_poll_interval("PostgresStore.poll_interval", poll_interval)
        lease = check_seconds(
            "PostgresStore.lease_seconds", lease_seconds, allow_zero=False, allow_none=False
        )
        assert lease is not None
        if lease < 3 * self.poll_interval:
            raise InvalidArgumentsError(
                f"PostgresStore.lease_seconds must be at least 3 x poll_interval "
                f"({3 * self.poll_interval:g} s), so that a runtime renews it several times "
                f"before it runs out, got {lease_seconds!r}"
            )
        self.lease_seconds: float | None = lease
        self.dsn = dsn
        self.schema = schema
        self.pool_size = check_int("PostgresStore.pool_size", pool_size, minimum=1)
        timeout = check_seconds(
            "PostgresStore.connect_timeout", connect_timeout, allow_zero=False, allow_none=False
        )
        statement = check_seconds(
            "PostgresStore.statement_timeout",
            statement_timeout,
            allow_zero=False,
            allow_none=False,
        )
        assert timeout is not None
        assert statement is not None
        self.connect_timeout = timeout
        self.statement_timeout = statement
        self.retention_seconds = check_seconds(
            "PostgresStore.retention_seconds",
            retention_seconds,
            allow_zero=True,
            allow_none=True,
        )
        self.max_rows = (
            None if max_rows is None else check_int("PostgresStore.max_rows", max_rows, minimum=1)
        )
        self._password: str | None = params.get("password") or None
        self._where = f"{mask_dsn(dsn)} (schema {schema})"
        extra: dict[str, Any] = {
            # libpq wants whole seconds, at least 2.
            "connect_timeout": max(2, round(timeout)),
            # A dead peer must not hang a thread: bound unacknowledged sends
            # and probe idle connections (both ignored on Unix sockets).
            "tcp_user_timeout": int(min(statement, lease / 3) * 1000),
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        if "application_name" not in params:
            extra["application_name"] = "trio_delegate"
        self._conninfo = pg.conninfo.make_conninfo(dsn, **extra)
        self._sql = _Sql(schema)
        self._pool: ConnectionPool[Any] | None = None
        self._opening = threading.Lock()
        self._locks: dict[str, psycopg.Connection[Any]] = {}
        self._listener: psycopg.Connection[Any] | None = None
        self._listening = trio.Lock()
        # The latest change number notified by each writer (None: anyone else).
        self._notified: dict[str | None, int] = {}
        self._limiter = trio.CapacityLimiter(self.pool_size)
        self._heads = LiveHeads()
        self._written = 0
        self._changes_since_cleanup = 0

    def __repr__(self) -> str:
        return f"<trio_delegate.PostgresStore {self._where}>"

    # -- the ResultStore protocol ---------------------------------------------------

    async def detach(self, runtime_id: str) -> None:
        """Unregister *runtime_id* and release its lock; close connections once none is attached.

        Raises:
            StoreError: the server failed while unregistering.
        """
        await self._run(self._detach_sync, runtime_id)
        if not self._locks:
            await self._close_listener()

    async def wait_changes(
        self, cursor: int, timeout: float, *, ignore_writes_of: str | None = None
    ) -> None:
        """Return once a notification says changes after *cursor* exist, or after *timeout*.

        It listens (``LISTEN``) on a connection of its own and waits for its
        socket on the Trio loop, no thread involved. Should listening fail,
        it sleeps out the *timeout*: the runtime's polling still finds the
        changes.

        Args:
            cursor: a cursor ``changes`` returned.
            timeout: seconds to wait at most.
            ignore_writes_of: a runtime id: a commit of nothing but its own
                writes is no change for this wait (see ``ResultStore``).

        Raises:
            StoreError: an argument is malformed.
        """
        check_cursor(cursor, self._where)
        timeout = check_wait_timeout(timeout, self._where)
        await trio.lowlevel.checkpoint()
        with trio.move_on_after(timeout):
            async with self._listening:
                await self._wait_notified(cursor, ignore_writes_of)

    async def aclose(self) -> None:
        """Close every connection of this handle, releasing the locks it holds (idempotent).

        Raises:
            StoreError: closing failed.
        """
        await self._close_listener()
        await self._run(self._close_sync)

    # -- plumbing ------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        text = mask_dsn(text)
        if self._password:
            text = text.replace(self._password, "***")
        return text

    def _error(self, exc: Exception) -> StoreError:
        """A StoreError naming the cause of *exc* and what to do about it."""
        return postgres_error(exc, self._where, self._scrub, self.statement_timeout)

    def _connect(self) -> psycopg.Connection[Any]:
        pg, _ = _psycopg()
        conn: psycopg.Connection[Any] = pg.connect(self._conninfo, autocommit=True)
        try:
            self._configure(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        ms = int(self.statement_timeout * 1000)
        conn.execute(f"SET statement_timeout = {ms}")
        conn.execute("SET idle_session_timeout = 0")

    def _ensure_pool(self) -> ConnectionPool[Any]:
        if self._pool is not None:
            return self._pool
        with self._opening:  # two threads must not both make one
            if self._pool is None:
                self._pool = self._open_pool()
            return self._pool

    def _open_pool(self) -> ConnectionPool[Any]:
        _, pgpool = _psycopg()
        # A first connection of our own reports precisely why it fails (an
        # unreachable server, bad credentials) and creates or checks the schema.
        with self._connect() as conn:
            self._migrate(conn)
        pool: ConnectionPool[Any] = pgpool.ConnectionPool(
            self._conninfo,
            kwargs={"autocommit": True},
            min_size=1,
            max_size=self.pool_size,
            open=False,
            timeout=self.connect_timeout,
            configure=self._configure,
            name=f"trio_delegate:{self.schema}",
            max_idle=60.0,
            reconnect_timeout=max(self.lease_seconds or 0.0, 30.0),
        )
        pool.open(wait=True, timeout=self.connect_timeout)
        return pool

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        statements = self._sql
        try:
            version = _schema_version(conn, statements, self._where)
        except StoreError:
            # Its two catalog reads may straddle another process's creation of
            # the schema and see half of it: decide under the lock below.
            version = -1
        if version == SCHEMA_VERSION:
            return
        with conn.transaction():
            # Two processes opening a new store at once: one creates, the
            # other waits here and then finds it made.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [statements.migrate_key]
            )
            version = _schema_version(conn, statements, self._where)
            if version == 0:
                for statement in statements.create:
                    conn.execute(statement)
                version = 1
            while version < SCHEMA_VERSION:
                for statement in statements.migrations[version]:
                    conn.execute(statement)
                version += 1
                conn.execute(statements.set_version, [str(version)])

    def _transact(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run *work* on a pooled connection, once more on a fresh one if that one was dead.

        Every unit of work here is idempotent (upserts, flags, marks), so a
        connection the server dropped (a restart, ``pg_terminate_backend``)
        costs one retry instead of an error.
        """
        pg, _ = _psycopg()
        pool = self._ensure_pool()
        for attempt in range(2):
            with pool.connection() as conn:
                try:
                    return work(conn)
                except pg.OperationalError:
                    if attempt or not conn.broken:
                        raise
            pool.check()
        raise AssertionError("unreachable")  # pragma: no cover

    # -- liveness ------------------------------------------------------------------------

    def _lock(self, runtime_id: str) -> psycopg.Connection[Any]:
        """A connection of its own holding *runtime_id*'s session advisory lock."""
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [runtime_id]
            ).fetchone()
            self._check_locked(runtime_id, row)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_locked(self, runtime_id: str, row: tuple[Any, ...] | None) -> None:
        if row is None or not row[0]:
            raise StoreError(
                f"runtime {runtime_id} holds its lock in the store {self._where} already "
                "(another process has attached it)",
                path=mask_dsn(self.dsn),
            )

    def _keep_lock(self, runtime_id: str) -> None:
        """Make sure *runtime_id* still holds its lock; take it again if its session died."""
        pg, _ = _psycopg()
        conn = self._locks.get(runtime_id)
        if conn is not None:
            try:
                conn.execute("SELECT 1")
            except pg.OperationalError:
                if not conn.broken and not conn.closed:
                    raise
            else:
                return
            conn.close()
            del self._locks[runtime_id]
        self._locks[runtime_id] = self._lock(runtime_id)

    def _renew(self, conn: psycopg.Connection[Any], runtime_id: str) -> None:
        conn.execute(
            self._sql.lease,
            [runtime_id, runtime_id, self.lease_seconds, socket.gethostname()[:255], os.getpid()],
        )

    def _mark_gone(self) -> list[str]:
        """Mark failed every live run of a gone runtime; return their ids."""
        statements = self._sql

        def find(conn: psycopg.Connection[Any]) -> list[str]:
            return [row[0] for row in conn.execute(statements.gone_runtimes).fetchall()]

        gone = self._transact(find)
        if not gone:
            return []
        for runtime_id in gone:
            if not is_runtime_id(runtime_id):
                raise StoreError(
                    f"the store {self._where} holds a live run whose runtime id "
                    f"{runtime_id!r} was not written by a runtime; it was changed by something "
                    "else",
                    path=mask_dsn(self.dsn),
                )

        def mark(conn: psycopg.Connection[Any]) -> list[str]:
            with conn.transaction():
                conn.execute(statements.lock_changes, [statements.change_key])
                # The goneness is checked again under the lock: a runtime may
                # have renewed its lease since the first look.
                rows = conn.execute(statements.gone_runs, [gone]).fetchall()
                ended = [interrupted(decode_row(row, self._where)) for row in rows]
                if ended:
                    # Read under the lock: their heads are the stored ones.
                    known = [EncodedRecord(record, None, encode_state(record)) for record in ended]
                    self._store(conn, known, own=False)
                    conn.execute(statements.notify, [statements.channel, ""])
                conn.execute(statements.forget_gone)
            return [record.run_id for record in ended]

        return self._transact(mark)

    # -- work on threads -----------------------------------------------------------------

    def _attach_sync(self, runtime_id: str) -> StoreSnapshot:
        check_runtime_id(runtime_id, self._where, mask_dsn(self.dsn))
        if runtime_id in self._locks:
            raise StoreError(
                f"runtime {runtime_id} is already attached to the store {self._where}",
                path=mask_dsn(self.dsn),
            )
        self._ensure_pool()
        self._locks[runtime_id] = self._lock(runtime_id)
        try:
            self._transact(lambda conn: self._renew(conn, runtime_id))
            marked = self._mark_gone()
            self._transact(self._tidy)
            terminal = self._transact(self._terminal)
        except BaseException:
            self._release(runtime_id)
            raise
        return StoreSnapshot(terminal, tuple(marked))

    def _terminal(self, conn: psycopg.Connection[Any]) -> tuple[tuple[str, StoredRun], ...]:
        where = self._where
        terminal = []
        for run_id, owner, subagent, status, usage in conn.execute(self._sql.terminal):
            if not is_run_id(run_id):
                raise StoreError(
                    f"the store {where} holds a row whose run id {run_id!r} was not written "
                    "by a runtime; it was changed by something else",
                    path=mask_dsn(self.dsn),
                )
            stored = StoredRun(
                _uncolumn(owner),
                _uncolumn(subagent),
                status_of(status, where, run_id),
                stored_usage(usage),
            )
            terminal.append((run_id, stored))
        return tuple(terminal)

    def _detach_sync(self, runtime_id: str) -> None:
        try:
            if runtime_id in self._locks:
                self._transact(lambda conn: self._unregister(conn, runtime_id))
        finally:
            self._release(runtime_id)
            if not self._locks:
                self._close_pool()

    def _unregister(self, conn: psycopg.Connection[Any], runtime_id: str) -> None:
        conn.execute(self._sql.unregister, [runtime_id])

    def _release(self, runtime_id: str) -> None:
        conn = self._locks.pop(runtime_id, None)
        if conn is not None:
            conn.close()  # the server releases the session's advisory lock

    def _close_pool(self) -> None:
        with self._opening:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(timeout=self.connect_timeout)

    def _close_sync(self) -> None:
        try:
            for runtime_id in list(self._locks):
                self._release(runtime_id)
        finally:
            self._close_pool()

    def _write_sync(self, records: list[RunRecord]) -> list[str]:
        where = self._where
        heads = self._heads
        encoded = [encode_record(record, where, heads) for record in fold(records)]
        statements = self._sql
        prune = False
        self._written += len(encoded)
        if self._written >= _PRUNE_EVERY:
            self._written = 0
            prune = True

        # Written by the runtime each record names: a batch of one runtime's
        # records is no news to that runtime (see wait_changes).
        writers = {item.record.runtime_id for item in encoded}
        asking = [item.record.run_id for item in encoded if item.record.questions]
        by = f" {writers.pop()}" if len(writers) == 1 and not asking else ""

        def work(conn: psycopg.Connection[Any]) -> list[str]:
            with conn.transaction():
                conn.execute(statements.lock_changes, [statements.change_key])
                ignored = self._store(conn, encoded, own=True)
                if asking:
                    conn.execute(statements.asking, [asking])
                if prune:
                    self._prune(conn)
                conn.execute(statements.notify, [statements.channel, by])
            return ignored

        ignored = self._transact(work)
        heads.committed(encoded)
        return ignored

    def _store(
        self, conn: psycopg.Connection[Any], encoded: list[EncodedRecord], *, own: bool
    ) -> list[str]:
        """Write *encoded*, each run at most once (inside a transaction holding the change lock).

        *own*: the records are written by the runtimes they name (``writer``);
        else by someone else (an interruption).

        Returns:
            the runs whose terminal record was ignored: another one stood.
        """
        statements = self._sql
        known = [item for item in encoded if item.head is None]
        whole = [item for item in encoded if item.head is not None]
        if known:
            cursor = conn.execute(
                statements.update_state,
                [
                    [item.record.run_id for item in known],
                    [item.record.status.value for item in known],
                    [_optional_column(item.record.ended_at) for item in known],
                    [item.state for item in known],
                    [item.record.cancel_requested for item in known],
                    [item.record.observed for item in known],
                    [item.record.runtime_id if own else None for item in known],
                ],
            )
            updated = {run_id for (run_id,) in cursor.fetchall()}
            if len(updated) != len(known):
                # Some rows were not live where this handle left them (ended
                # by another runtime, or removed): write those whole. The
                # upsert leaves a terminal row alone.
                whole += [
                    with_head(item, self._where)
                    for item in known
                    if item.record.run_id not in updated
                ]
        if not whole:
            return []
        cursor = conn.execute(
            statements.upsert,
            [
                [item.record.run_id for item in whole],
                [item.record.runtime_id for item in whole],
                [_column(item.record.owner) for item in whole],
                [_column(item.record.subagent) for item in whole],
                [item.record.status.value for item in whole],
                [_column(item.record.admitted_at) for item in whole],
                [_optional_column(item.record.ended_at) for item in whole],
                [item.head for item in whole],
                [item.state for item in whole],
                [item.record.cancel_requested for item in whole],
                [item.record.observed for item in whole],
                [item.record.runtime_id if own else None for item in whole],
            ],
        )
        # The rows written come back. An ending that was not written met a
        # terminal row: another ending, unless it holds this very one.
        written = {run_id for (run_id,) in cursor.fetchall()}
        unwritten = {
            item.record.run_id: item.state
            for item in whole
            if item.record.status.is_terminal and item.record.run_id not in written
        }
        if not unwritten:
            return []
        stored = dict(conn.execute(statements.stored_states, [list(unwritten)]).fetchall())
        return [
            run_id
            for run_id, state in unwritten.items()
            if run_id in stored and stored[run_id] != state
        ]

    def _get_sync(self, run_id: str) -> RunRecord | None:
        if not is_run_id(run_id):
            return None
        rows = self._transact(lambda conn: conn.execute(self._sql.get, [run_id]).fetchall())
        return decode_full_row(rows[0], self._where) if rows else None

    def _list_sync(
        self, status: RunStatus | None, owner: str | None, limit: int
    ) -> list[RunRecord]:
        query, params = self._sql.listing(status, owner, limit)
        rows = self._transact(lambda conn: conn.execute(query, params).fetchall())
        return [decode_full_row(row, self._where) for row in rows]

    def _sweep_sync(self, runtime_id: str) -> tuple[str, ...]:
        check_runtime_id(runtime_id, self._where, mask_dsn(self.dsn))
        mine = runtime_id in self._locks
        if mine:
            self._keep_lock(runtime_id)
        marked = self._mark_gone()
        if mine:
            self._transact(lambda conn: self._renew(conn, runtime_id))
        return tuple(marked)

    def _position(self, conn: psycopg.Connection[Any]) -> int:
        return _position(conn, self._sql)

    def _changes_sync(self, cursor: int | None, ignore: str | None) -> ChangeBatch:
        if cursor is None:
            return ChangeBatch(self._transact(self._position))
        check_cursor(cursor, self._where)
        if ignore is None:
            rows = self._transact(lambda conn: conn.execute(self._sql.changes, [cursor]).fetchall())
            return change_batch(cursor, rows, self._where)
        statements = self._sql

        def work(conn: psycopg.Connection[Any]) -> tuple[int, list[Any]]:
            with conn.transaction():
                # No change commits while this is held: every change up to the
                # position is visible, and the rows read are exactly those.
                conn.execute(statements.lock_changes_shared, [statements.change_key])
                row = conn.execute(statements.position).fetchone()
                position = int(row[0]) if row is not None and row[1] else 0
                query = statements.foreign_changes
                return position, conn.execute(query, [cursor, position, ignore]).fetchall()

        position, rows = self._transact(work)
        batch = change_batch(cursor, rows, self._where)
        return ChangeBatch(max(batch.cursor, position), batch.records)

    def _flag_sync(self, run_id: str, flag: str, by: str | None = None) -> RunRecord | None:
        if not is_run_id(run_id):
            return None
        statements = self._sql

        def work(conn: psycopg.Connection[Any]) -> list[Any]:
            with conn.transaction():
                conn.execute(statements.lock_changes, [statements.change_key])
                if conn.execute(statements.flag[flag], {"run_id": run_id, "by": by}).rowcount:
                    conn.execute(statements.notify, [statements.channel, ""])
                return conn.execute(statements.get, [run_id]).fetchall()

        rows = self._transact(work)
        return decode_full_row(rows[0], self._where) if rows else None

    def _post_sync(self, run_id: str, request: dict[str, Any]) -> RunRecord | None:
        if not is_run_id(run_id):
            return None
        statements = self._sql
        where = self._where

        def work(conn: psycopg.Connection[Any]) -> list[Any]:
            with conn.transaction():
                conn.execute(statements.lock_changes, [statements.change_key])
                row = conn.execute(statements.requests, [run_id]).fetchone()
                if row is None:
                    return []
                status, state, stored = row
                requests = requests_after(status_of(status, where, run_id), state, stored, request)
                if requests != stored:
                    # Left by another runtime: news for the run's own (writer NULL).
                    conn.execute(statements.post, [requests, run_id])
                    conn.execute(statements.notify, [statements.channel, ""])
                return conn.execute(statements.get, [run_id]).fetchall()

        rows = self._transact(work)
        return decode_full_row(rows[0], where) if rows else None

    def _tidy(self, conn: psycopg.Connection[Any]) -> None:
        """Prune old runs, and forget gone runtimes that left no live run."""
        with conn.transaction():
            self._prune(conn)
            conn.execute(self._sql.forget_gone)

    def _prune(self, conn: psycopg.Connection[Any]) -> None:
        statements = self._sql
        cutoff = None if self.retention_seconds is None else pruned_before(self.retention_seconds)
        if cutoff is not None:
            conn.execute(statements.prune_age, [cutoff])
        if self.max_rows is not None:
            conn.execute(statements.prune_rows, [self.max_rows])

    # -- notifications, on the Trio loop ----------------------------------------------------

    def _listen_sync(self) -> psycopg.Connection[Any]:
        pg, _ = _psycopg()
        self._ensure_pool()  # the schema exists
        conn = self._connect()
        try:
            channel = pg.sql.Identifier(self._sql.channel)
            conn.execute(pg.sql.SQL("LISTEN {}").format(channel))
        except BaseException:
            conn.close()
            raise
        return conn

    def _notified_after(self, cursor: int, ignore: str | None) -> bool:
        return any(
            number > cursor
            for writer, number in self._notified.items()
            if writer is None or writer != ignore
        )

    async def _wait_notified(self, cursor: int, ignore: str | None) -> None:
        pg, _ = _psycopg()
        notified = self._notified
        while not self._notified_after(cursor, ignore):
            listener = self._listener
            if listener is None:
                try:
                    listener = await self._run(self._listen_sync)
                except StoreError:
                    # Poll fallback: the runtime asks for changes on its own
                    # schedule; there is nothing to wake it for here.
                    await trio.sleep_forever()
                self._listener = listener
                # Listening only from now: what was committed before shows in
                # the current position.
                position = await self._run(self._transact, self._position)
                notified[None] = max(notified.get(None, 0), position)
                continue
            try:
                listener.pgconn.consume_input()
                while (note := listener.pgconn.notifies()) is not None:
                    # "<number>" or "<number> <runtime id whose own writes it was>"
                    text, _, by = note.extra.decode("utf-8", "replace").partition(" ")
                    try:
                        number = int(text)
                    except ValueError:
                        continue
                    writer = by if is_runtime_id(by) else None
                    notified[writer] = max(notified.get(writer, 0), number)
                    if len(notified) > _NOTIFIED_WRITERS:
                        # Bounded: the latest number of all, writer unknown
                        # (a wait may wake for nothing new, never miss news).
                        latest = max(notified.values())
                        notified.clear()
                        notified[None] = latest
            except pg.OperationalError:
                await self._close_listener()
                continue
            if self._notified_after(cursor, ignore):
                return
            try:
                await trio.lowlevel.wait_readable(listener.fileno())
            except trio.ClosedResourceError:
                continue  # closed by a detach meanwhile: listen again

    async def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is None:
            return
        pg, _ = _psycopg()
        # Wake a task waiting on its socket (it listens again) before the
        # descriptor is closed under it; a lost connection has no socket left.
        with contextlib.suppress(OSError, ValueError, pg.OperationalError):
            trio.lowlevel.notify_closing(listener.fileno())
        await run_sync(listener.close)


def postgres_error(
    exc: BaseException, where: str, scrub: Callable[[str], str], statement_timeout: float
) -> StoreError:
    """A StoreError naming the cause of a psycopg failure *exc* and what to do about it."""
    pg, pgpool = _psycopg()
    text = scrub(str(exc).strip().replace("\n", " "))
    path = where.split(" (schema ", 1)[0]
    errors = pg.errors
    if isinstance(exc, errors.QueryCanceled):
        what, advice = (
            "did not answer in time",
            f"a statement ran past statement_timeout ({statement_timeout:g} s); check the "
            "server's load and locks, or raise statement_timeout",
        )
    elif isinstance(exc, pgpool.PoolTimeout):
        what, advice = (
            "gave no connection in time",
            "check that the server accepts connections from here and is not at its "
            "max_connections, or raise connect_timeout or pool_size",
        )
    elif (
        "password authentication failed" in text
        or "no password supplied" in text
        or (isinstance(exc, errors.InvalidAuthorizationSpecification | errors.InvalidPassword))
    ):
        what, advice = (
            "refused the credentials",
            "check the user in the DSN and the password in PGPASSWORD, the password file "
            "(~/.pgpass) or the service file; never put it in a configuration file",
        )
    elif isinstance(exc, errors.InsufficientPrivilege):
        what, advice = (
            "refused an operation",
            "grant the user rights to create and use the store's schema, or create it "
            "beforehand as its owner",
        )
    elif "does not exist" in text and "database" in text:
        what, advice = ("names a database that does not exist", "create it, or fix the DSN")
    elif isinstance(exc, pg.OperationalError):
        what, advice = (
            "cannot be reached",
            "check the host and port in the DSN, that the server runs, and that it accepts "
            "connections from here",
        )
    elif isinstance(exc, pg.Error):
        what, advice = ("failed", "see the cause below")
    else:
        what, advice = (
            "failed unexpectedly",
            f"({type(exc).__name__}); its contents may have been changed by something else",
        )
    return StoreError(f"the store {where} {what} ({text}): {advice}", path=path)


@final
class PostgresReader(RecordReader):
    """Read the records of a PostgreSQL store without ever writing to it.

    For ``trio-delegate runs``: one connection in read-only mode
    (``default_transaction_read_only``); nothing is created or migrated.

    Args:
        dsn: the connection string (the password from the environment).
        schema: the store's PostgreSQL schema.
        timeout: seconds to wait for the connection and any one statement.
    """

    __slots__ = ("_password", "_sql", "_where", "dsn", "timeout")

    def __init__(self, dsn: str, *, schema: str = "trio_delegate", timeout: float = 10.0) -> None:
        super().__init__()
        pg, _ = _psycopg()
        if not _SCHEMA_NAME.fullmatch(schema):
            raise InvalidArgumentsError(f"not a store schema name: {schema!r}")
        self.dsn = dsn
        self.timeout = timeout
        self._where = f"{mask_dsn(dsn)} (schema {schema})"
        try:
            self._password = pg.conninfo.conninfo_to_dict(dsn).get("password") or None
        except pg.ProgrammingError as exc:
            raise StoreError(
                f"{mask_dsn(dsn)} is not a valid connection string ({mask_dsn(str(exc))})",
                path=mask_dsn(dsn),
            ) from None
        self._sql = _Sql(schema)

    @property
    def where(self) -> str:
        """The store, as messages name it (password masked)."""
        return self._where

    def _scrub(self, text: str) -> str:
        text = mask_dsn(text)
        return text.replace(self._password, "***") if self._password else text

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is not None:
            existing: psycopg.Connection[Any] = self._conn
            return existing
        pg, _ = _psycopg()
        conninfo = pg.conninfo.make_conninfo(
            self.dsn,
            connect_timeout=max(2, round(self.timeout)),
            options="-c default_transaction_read_only=on",
            application_name="trio_delegate runs",
        )
        conn: psycopg.Connection[Any] = pg.connect(conninfo, autocommit=True)
        try:
            conn.execute(f"SET statement_timeout = {int(self.timeout * 1000)}")
            _check_exists(_schema_version(conn, self._sql, self._where), self._where, self.dsn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _error(self, exc: Exception) -> StoreError:
        return postgres_error(exc, self._where, self._scrub, self.timeout)

    def _usage_rows(self, after: int, owner: str | None, limit: int) -> list[tuple[Any, ...]]:
        conn = self._connection()
        if owner is None:
            cursor = conn.execute(self._sql.usage_rows, [after, limit])
        else:
            cursor = conn.execute(self._sql.usage_rows_of, [after, owner, owner + "/", limit])
        return [tuple(row) for row in cursor.fetchall()]

    def _usage_row(self, run_id: str) -> tuple[Any, ...] | None:
        row = self._connection().execute(self._sql.usage_row, [run_id]).fetchone()
        return None if row is None else tuple(row)

    def _get(self, run_id: str) -> RunRecord | None:
        rows = self._connection().execute(self._sql.read_get, [run_id]).fetchall()
        return self._decode(rows[0], self._where) if rows else None

    def _list(self, status: RunStatus | None, owner: str | None, limit: int) -> list[RunRecord]:
        query, params = self._sql.listing(status, owner, limit, self._sql.read_columns)
        rows = self._connection().execute(query, params).fetchall()
        return self._records(rows, self._where)

    def _ids_starting(self, start: str, limit: int) -> list[str]:
        rows = self._connection().execute(self._sql.ids_starting, [start, limit]).fetchall()
        return [str(run_id) for (run_id,) in rows]

    def _changes(self, cursor: int | None) -> ChangeBatch:
        conn = self._connection()
        if cursor is None:
            return ChangeBatch(_position(conn, self._sql))
        check_cursor(cursor, self._where)
        rows = conn.execute(self._sql.read_changes, [cursor]).fetchall()
        return self._batch(cursor, rows, self._where)
