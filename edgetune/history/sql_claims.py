"""The SQL side of the history's claims: leases that keep two tuners off one candidate.

A mixin of :class:`~edgetune.history.database.HistoryDatabase`. Every claim
operation is one statement, so it is atomic on SQLite (one writer at a time)
and on PostgreSQL (row locks; an ``ON CONFLICT ... WHERE`` re-checks the row
another transaction just changed). Times come from the database's clock, not
the tuner's: hosts sharing a PostgreSQL history need not agree on the time.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from tvm.target import Target

from edgetune.errors import HistoryError
from edgetune.history.schema import claims
from edgetune.history.sql import insert_statement, sha256, target_json
from edgetune.history.store import Claim, ClaimOwner, ClaimStore

_COLUMNS = (
    claims.c.target_hash, claims.c.candidate_key, claims.c.owner_host, claims.c.owner_pid,
    claims.c.owner_run, claims.c.claimed_at, claims.c.expires_at, claims.c.record_id,
)


def _now(conn: Connection) -> Any:
    """The database's clock in Unix seconds, as an SQL expression."""
    if conn.dialect.name == "postgresql":
        return sa.func.extract("epoch", sa.func.clock_timestamp())
    return (sa.func.julianday("now") - 2440587.5) * 86400.0


def _claim(row: Any) -> Claim:
    return Claim(
        target_hash=row.target_hash, candidate_key=row.candidate_key,
        owner=ClaimOwner(row.owner_host, int(row.owner_pid), row.owner_run),
        claimed_at=float(row.claimed_at), expires_at=float(row.expires_at),
        record_id=None if row.record_id is None else int(row.record_id), expired=bool(row.expired),
    )


def _select(conn: Connection) -> sa.Select:
    expired = sa.and_(claims.c.record_id.is_(None), claims.c.expires_at < _now(conn))
    return sa.select(*_COLUMNS, sa.case((expired, 1), else_=0).label("expired"))


def _claim_hash(target: Target, timing: str | None) -> str:
    """A claim's ``target_hash``: the target's, and for flushed timing a distinct one.

    Tuners timing another way must not take each other's results (a finished
    claim hands its record to whoever asks), so they claim apart.
    """
    text = target_json(target)
    return sha256(text if timing in (None, "warm") else f"{text}|timing={timing}")


def _key(target: Target, candidate_key: str, timing: str | None) -> tuple[Any, Any]:
    return claims.c.target_hash == _claim_hash(target, timing), claims.c.candidate_key == candidate_key


def _owned(owner: ClaimOwner) -> Any:
    return sa.and_(claims.c.owner_run == owner.run, claims.c.record_id.is_(None))


class SqlClaims(ClaimStore):
    """Claim, renew, finish and release leases on candidates, in the history's ``claims`` table.

    Composed into a :class:`~edgetune.history.database.HistoryDatabase` (its
    ``claims``), whose engine access (``core._access``) it uses.
    """

    def __init__(self, core: Any) -> None:
        self._core = core

    def claim_candidate(
        self, target: Target, candidate_key: str, owner: ClaimOwner, lease_sec: float, *, take_measured: bool = False
    ) -> Claim:
        if lease_sec <= 0:
            raise HistoryError(f"a claim's lease must be > 0 s, got {lease_sec!r}")
        with self._core._access("claim a candidate", write=True) as engine:
            for _attempt in range(5):
                with engine.begin() as conn:
                    now = _now(conn)
                    mine = {
                        "owner_host": owner.host, "owner_pid": owner.pid, "owner_run": owner.run,
                        "claimed_at": now, "expires_at": now + lease_sec, "record_id": None,
                    }
                    stmt = insert_statement(conn, claims).values(
                        target_hash=_claim_hash(target, self._core.timing), candidate_key=candidate_key, **mine
                    )
                    # insert, or take over an expired (or, if asked, a measured) claim: one statement
                    free = sa.and_(claims.c.record_id.is_(None), claims.c.expires_at < now)
                    if take_measured:
                        free = sa.or_(free, claims.c.record_id.is_not(None))
                    conn.execute(
                        stmt.on_conflict_do_update(index_elements=["target_hash", "candidate_key"], set_=mine, where=free)
                    )
                    # in the same transaction: who holds it now (us, or the live owner we lost to)
                    row = conn.execute(_select(conn).where(*_key(target, candidate_key, self._core.timing))).first()
                if row is not None:
                    return _claim(row)
            raise HistoryError(f"{candidate_key}: claim kept vanishing while being read")

    def claim_of(self, target: Target, candidate_key: str) -> Claim | None:
        with self._core._access("read claims") as engine, engine.connect() as conn:
            row = conn.execute(_select(conn).where(*_key(target, candidate_key, self._core.timing))).first()
            return None if row is None else _claim(row)

    def renew_claims(self, owner: ClaimOwner, lease_sec: float) -> int:
        with self._core._access("renew claims", write=True) as engine, engine.begin() as conn:
            return conn.execute(
                claims.update().where(_owned(owner)).values(expires_at=_now(conn) + lease_sec)
            ).rowcount

    def finish_claim(self, target: Target, candidate_key: str, owner: ClaimOwner, record_id: int) -> bool:
        with self._core._access("finish a claim", write=True) as engine, engine.begin() as conn:
            done = conn.execute(
                claims.update().where(*_key(target, candidate_key, self._core.timing), _owned(owner)).values(record_id=record_id)
            ).rowcount
            return bool(done)

    def release_claim(self, target: Target, candidate_key: str, owner: ClaimOwner) -> bool:
        with self._core._access("release a claim", write=True) as engine, engine.begin() as conn:
            return bool(conn.execute(claims.delete().where(*_key(target, candidate_key, self._core.timing), _owned(owner))).rowcount)

    def release_claims(self, owner: ClaimOwner) -> int:
        with self._core._access("release claims", write=True) as engine, engine.begin() as conn:
            return conn.execute(claims.delete().where(_owned(owner))).rowcount

    def list_claims(self, *, live_only: bool = True) -> list[Claim]:
        with self._core._access("read claims") as engine, engine.connect() as conn:
            stmt = _select(conn).order_by(claims.c.claimed_at, claims.c.candidate_key)
            if live_only:
                stmt = stmt.where(claims.c.record_id.is_(None), claims.c.expires_at >= _now(conn))
            return [_claim(row) for row in conn.execute(stmt).all()]
