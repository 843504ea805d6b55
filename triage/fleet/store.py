"""The fleet's history: one SQLite file (the standard library's `sqlite3`, no server).

Schema `triage.fleet.db` version 1 (`PRAGMA user_version` and the `meta` table say which):

    meta(key TEXT PRIMARY KEY, value TEXT)      schema = triage.fleet.db, version = 1
    runs(id INTEGER PRIMARY KEY, started REAL, finished REAL, jobs_dir TEXT,
         found INTEGER, new INTEGER, known INTEGER, errors INTEGER, triage TEXT)
    jobs(digest TEXT PRIMARY KEY,               sha256 of the job's files (collect.py)
         path TEXT, name TEXT,                  where it was read
         run INTEGER REFERENCES runs(id),       the run that first read it
         seen_at REAL, job_time REAL,           when read; when it happened (its logs' clock)
         outcome TEXT, symptom TEXT, root_cause TEXT, mechanism TEXT,
         record TEXT)                           the whole JobRecord row as JSON
    job_hosts(digest TEXT, host TEXT, ranks INTEGER, culprit INTEGER,
              PRIMARY KEY (digest, host))       who took part, who hosted the culprit
    signals(digest TEXT, host TEXT, gpu TEXT, signal TEXT, label TEXT, rank INTEGER,
            source TEXT, line INTEGER, text TEXT)   hardware-ish lines, per host and GPU
    paths(path TEXT PRIMARY KEY, fingerprint TEXT, digest TEXT)
                                                a path's files/bytes/mtime when last hashed:
                                                unchanged, its digest is reused unread
    unreadable(path TEXT PRIMARY KEY, run INTEGER, error TEXT)
                                                the last run's bundles that could not be read
                                                (tried again next run; not counted as jobs)

Times are epoch seconds (UTC). A job is added once, by digest: a later run finds it known and
does not read it again. A file that is not this schema (another program's database, a newer
version, a corrupt file) is refused with a clear message and left untouched; so is a file
another process holds locked.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

from triage.fleet.model import JobRecord, StoredJob

SCHEMA = "triage.fleet.db"
VERSION = 1
LOCK_WAIT_S = 5.0
COMMIT_EVERY = 200  # rows; and at the end of the run

_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY, started REAL NOT NULL, finished REAL, jobs_dir TEXT NOT NULL,
  found INTEGER NOT NULL DEFAULT 0, new INTEGER NOT NULL DEFAULT 0,
  known INTEGER NOT NULL DEFAULT 0, errors INTEGER NOT NULL DEFAULT 0, triage TEXT
);
CREATE TABLE jobs (
  digest TEXT PRIMARY KEY, path TEXT NOT NULL, name TEXT NOT NULL,
  run INTEGER NOT NULL REFERENCES runs(id), seen_at REAL NOT NULL, job_time REAL,
  outcome TEXT NOT NULL, symptom TEXT, root_cause TEXT, mechanism TEXT, record TEXT NOT NULL
);
CREATE TABLE job_hosts (
  digest TEXT NOT NULL REFERENCES jobs(digest), host TEXT NOT NULL,
  ranks INTEGER NOT NULL, culprit INTEGER NOT NULL, PRIMARY KEY (digest, host)
);
CREATE TABLE signals (
  digest TEXT NOT NULL REFERENCES jobs(digest), host TEXT NOT NULL, gpu TEXT,
  signal TEXT NOT NULL, label TEXT NOT NULL, rank INTEGER, source TEXT, line INTEGER, text TEXT
);
CREATE TABLE paths (path TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, digest TEXT NOT NULL);
CREATE TABLE unreadable (path TEXT PRIMARY KEY, run INTEGER NOT NULL, error TEXT NOT NULL);
CREATE INDEX jobs_run ON jobs(run);
CREATE INDEX job_hosts_host ON job_hosts(host);
CREATE INDEX signals_host ON signals(host);
CREATE INDEX signals_digest ON signals(digest);
"""


class StoreError(Exception):
    """The database cannot be used as it is; nothing was written to it."""


class Store:
    """An open fleet database. Use `Store.open(path)`; close it (or use `with`)."""

    def __init__(self, path: str, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        self._pending = 0

    # ----------------------------------------------------------------- opening

    @classmethod
    def open(cls, path: str, lock_wait_s: float = LOCK_WAIT_S) -> Store:
        """Open (or create) the fleet database at `path`; `StoreError` when it is not one, is
        corrupt, of a newer version, or locked by another process for over `lock_wait_s`."""
        existed = os.path.exists(path)
        if existed and not os.path.isfile(path):
            raise StoreError(f"{path} is not a file")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise StoreError(f"cannot create {path}: the folder {folder} does not exist")
        try:
            conn = sqlite3.connect(path, timeout=lock_wait_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {path}: {exc}") from exc
        store = cls(path, conn)
        try:
            store._check_or_create(existed)
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(_explain(path, exc, lock_wait_s)) from exc
        return store

    def _check_or_create(self, existed: bool) -> None:
        c = self.conn
        # Take the write lock now: a second fleet run on the same file waits LOCK_WAIT_S, then
        # stops with a clear message before it reads a single job.
        c.execute("BEGIN IMMEDIATE")
        try:
            if existed and os.path.getsize(self.path) > 0:
                ok = c.execute("PRAGMA quick_check").fetchone()
                if not ok or ok[0] != "ok":
                    raise StoreError(
                        f"{self.path} is a damaged SQLite file ({ok[0] if ok else 'no answer'}); "
                        "nothing was written to it. Move it away or name another --db."
                    )
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                # one statement at a time: executescript() would commit the lock taken above
                for statement in _TABLES.split(";"):
                    if statement.strip():
                        c.execute(statement)
                c.execute("INSERT INTO meta VALUES ('schema', ?), ('version', ?)",
                          (SCHEMA, str(VERSION)))  # fmt: skip
                c.execute(f"PRAGMA user_version = {VERSION}")
                c.execute("COMMIT")
                return
            meta = dict(c.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
            if meta.get("schema") != SCHEMA:
                raise StoreError(
                    f"{self.path} is an SQLite database of another program (no triage fleet "
                    "schema in it); nothing was written to it. Name another --db."
                )
            version = int(meta.get("version", "0"))
            if version > VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer triage (fleet schema version {version}; "
                    f"this one reads {VERSION}); nothing was written to it. Upgrade triage."
                )
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise

    def close(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- writing

    def _write(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN IMMEDIATE")
        return self.conn.execute(sql, args)

    def _row_done(self) -> None:
        self._pending += 1
        if self._pending >= COMMIT_EVERY:
            self.commit()

    def commit(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        self._pending = 0

    def begin_run(self, jobs_dir: str, found: int, known: int) -> int:
        from triage import __version__

        self._write(
            "INSERT INTO runs (started, jobs_dir, found, known, triage) VALUES (?, ?, ?, ?, ?)",
            (time.time(), jobs_dir, found, known, __version__),
        )
        run = int(self.conn.execute("SELECT last_insert_rowid()").fetchone()[0])
        self._write("DELETE FROM unreadable")  # tried again now; what fails again is re-added
        self.commit()
        return run

    def finish_run(self, run: int, new: int, errors: int) -> None:
        self._write(
            "UPDATE runs SET finished = ?, new = ?, errors = ? WHERE id = ?",
            (time.time(), new, errors, run),
        )
        self.commit()

    def remember_path(self, path: str, fingerprint: str, digest: str) -> None:
        self._write(
            "INSERT OR REPLACE INTO paths (path, fingerprint, digest) VALUES (?, ?, ?)",
            (path, fingerprint, digest),
        )
        self._row_done()

    def add(self, record: JobRecord, run: int) -> bool:
        """Keep a job's record; False when its digest was already there (nothing changes)."""
        now = time.time()
        # OR IGNORE: another run on the same file may have added it since this one looked
        added = self._write(
            "INSERT OR IGNORE INTO jobs (digest, path, name, run, seen_at, job_time, outcome, "
            "symptom, root_cause, mechanism, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.digest,
                record.job,
                record.name,
                run,
                now,
                record.job_time,
                record.outcome,
                record.symptom.id if record.symptom else None,
                record.root_cause.id if record.root_cause else None,
                record.mechanism,
                json.dumps(record.to_row()),
            ),
        ).rowcount
        if not added:
            return False
        for part in record.hosts:
            self._write(
                "INSERT OR IGNORE INTO job_hosts VALUES (?, ?, ?, ?)",
                (record.digest, part.host, len(part.ranks), int(part.culprit)),
            )
        for s in record.signals:
            self._write(
                "INSERT INTO signals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.digest, s.host, s.gpu, s.signal, s.label, s.rank, s.source, s.line,
                 s.text),
            )  # fmt: skip
        self._row_done()
        return True

    def unreadable(self, path: str, run: int, error: str) -> None:
        self._write(
            "INSERT OR REPLACE INTO unreadable (path, run, error) VALUES (?, ?, ?)",
            (path, run, error),
        )
        self._row_done()

    # ----------------------------------------------------------------- reading

    def known(self, digest: str) -> bool:
        return (
            self.conn.execute("SELECT 1 FROM jobs WHERE digest = ?", (digest,)).fetchone()
            is not None
        )

    def path_digest(self, path: str, fingerprint: str) -> str | None:
        """The digest of `path` when it was hashed with this very fingerprint, else None."""
        row = self.conn.execute(
            "SELECT fingerprint, digest FROM paths WHERE path = ?", (path,)
        ).fetchone()
        return row[1] if row and row[0] == fingerprint else None

    def jobs(self) -> Iterator[StoredJob]:
        """Every job kept, oldest run first."""
        for record, run, seen_at in self.conn.execute(
            "SELECT record, run, seen_at FROM jobs ORDER BY run, name"
        ):
            yield StoredJob(JobRecord.from_row(json.loads(record)), int(run), float(seen_at))

    def unreadable_rows(self) -> list[tuple[str, str]]:
        return list(self.conn.execute("SELECT path, error FROM unreadable ORDER BY path"))

    def runs(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM runs").fetchone()[0])


def _explain(path: str, exc: sqlite3.Error, waited_s: float) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return (
            f"{path} is locked by another process (another `triage fleet` writing to it?); "
            f"waited {waited_s:g} s, nothing was written. Try again when it is done."
        )
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return (
            f"{path} is not a readable SQLite database ({text}); nothing was written to it. "
            "Move it away or name another --db."
        )
    return f"cannot use {path} as the fleet database: {text}; nothing was written to it."
