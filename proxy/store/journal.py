"""The crash journal: every answered client exchange on local disk until the store has it.

The recorder keeps records in memory until its writer thread commits them; a SIGKILL or an OOM
kill loses that queue. So the client path also appends each record to this journal *before the
answer's last byte is sent*: one `os.write` of one frame to an `O_APPEND` file. A write that has
returned is in the kernel's page cache and survives the death of the process; a thread flushes it
to the disk every `fsync_interval_s`, after which it also survives a crash of the machine.

Files, in one directory per store URL (`directory_for`), each process with its own *owner* name
(`<pid>-<random>`):

- `<owner>.lock` — held with `flock` while the process lives: a journal whose lock can be taken
  belongs to a process that is gone;
- `<owner>-<n>.seg` — segments of frames, a new one every `segment_bytes`. A frame is a header
  (`<IIQ`: payload length, CRC-32 of sequence number and payload, sequence number) and the
  record as JSON (orjson). Sequence numbers count from 1 in each process;
- `<owner>.state` — the last sequence number flushed to disk, and its segment, rewritten after
  each flush: what a start after a machine crash can hold the segments against.

The recorder tells the journal which records it committed (`settled`, keyed by request id, arm
and target: one client exchange has at most one record per arm); a segment none of whose
records is still waiting is deleted, except the one being written. At the next start (`replay`)
the segments of every owner that is gone are read, a torn or corrupt frame ends its segment (the
write the crash cut: counted, never an error), records already in the store are left out (the
store's keys are read first: a record is never stored twice), the rest are written and the
owner's files deleted.

What the journal holds is what the store would keep: `store.bodies: none` journals no bodies,
`redacted` journals them redacted; bodies larger than `max_body_bytes` together are left out of
the journal entry (counted), because serialising or redacting them would be work proportional to
their size on the event loop. Only the client path's exchange records are journaled; shadows,
pairs, check results and findings are derived work that a crash may lose, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import logging
import os
import re
import struct
import tempfile
import threading
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry
from sqlalchemy.engine import make_url

from proxy.config import StoreSpec
from proxy.core import Arm, ExchangeRecord, Status, StoredRecord, Usage
from proxy.observability import JournalMetrics

from .errors import StoreError
from .exchanges import Store
from .redaction import apply_bodies_policy

log = logging.getLogger(__name__)

_HEADER = struct.Struct("<IIQ")
"""Payload length, CRC-32 of the sequence number and the payload, sequence number."""
_SEQ = struct.Struct("<Q")
_MAX_FRAME = 64 * 1024 * 1024
"""A length beyond this is a corrupt header, not a record."""
_SEGMENT = re.compile(r"^(?P<owner>\d+-[0-9a-f]+)-(?P<n>\d{6})\.seg$")
_REPLAY_BATCH = 500
_SETTLE_CHUNK = 64
SEGMENT_BYTES = 64 * 1024 * 1024
_RECYCLE_BYTES = 1024 * 1024
"""A segment being written is replaced by a new one once the store has all of it and it is
this large, so a steady journal holds about this much, not up to a whole segment."""
REPLAYED_TAG = "journal"
"""Added to the tags of a record the store got from the journal at start."""

Key = tuple[str, str, str]
_FIELDS = frozenset(f.name for f in dataclasses.fields(ExchangeRecord))


def directory_for(spec: StoreSpec) -> Path:
    """The journal directory of a store: one per store URL, password aside (a digest of it, so
    a rotated password still finds its journal), under `spec.journal_dir`, or next to the SQLite
    file, or in the temporary directory."""
    url = make_url(spec.url)
    if spec.journal_dir is not None:
        base = Path(spec.journal_dir)
    elif url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        base = Path(f"{url.database}.journal")
    else:
        base = Path(tempfile.gettempdir()) / "mirrorgate-journal"
    identity = url.render_as_string(hide_password=True)  # the password as "***"
    return base / hashlib.sha256(identity.encode()).hexdigest()[:16]


def encode(record: ExchangeRecord) -> bytes:
    """The record as journaled: orjson's rendering of the dataclass (enums by value, moments
    in ISO 8601 with their offset)."""
    return orjson.dumps(record)


def decode(payload: bytes) -> ExchangeRecord:
    """The record `encode` wrote. Raises ValueError (or KeyError, TypeError) on anything else."""
    data: dict[str, Any] = orjson.loads(payload)
    known = {k: v for k, v in data.items() if k in _FIELDS}  # written by another version
    return ExchangeRecord(
        **{
            **known,
            "arm": Arm(data["arm"]),
            "status": Status(data["status"]),
            "started_at": datetime.fromisoformat(data["started_at"]),
            "usage": Usage(**data["usage"]),
            "tags": tuple(data["tags"]),
        }
    )


def frame(seq: int, payload: bytes) -> bytes:
    """One journal entry: header and payload, written with one `os.write`."""
    crc = zlib.crc32(payload, zlib.crc32(_SEQ.pack(seq)))
    return _HEADER.pack(len(payload), crc, seq) + payload


@dataclass
class SegmentContents:
    """What one segment file held: its intact entries, and whether it ended in a torn frame."""

    entries: list[tuple[int, bytes]]
    """(sequence number, payload) of each intact frame, in file order."""
    torn: bool
    """The file ended (or broke off) in an incomplete or corrupt frame."""


def read_segment(data: bytes) -> SegmentContents:
    """The frames of a segment, up to the first one that is incomplete or fails its CRC (a
    length cannot be trusted past a bad frame, so the rest of the segment is not read)."""
    entries: list[tuple[int, bytes]] = []
    offset, end = 0, len(data)
    while offset < end:
        if end - offset < _HEADER.size:
            return SegmentContents(entries, torn=True)
        length, crc, seq = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        if length > _MAX_FRAME or start + length > end:
            return SegmentContents(entries, torn=True)
        payload = data[start : start + length]
        if zlib.crc32(payload, zlib.crc32(_SEQ.pack(seq))) != crc:
            return SegmentContents(entries, torn=True)
        entries.append((seq, payload))
        offset = start + length
    return SegmentContents(entries, torn=False)


def key_of(record: ExchangeRecord) -> Key:
    return (record.request_id, record.arm.value, record.target)


@dataclass
class _Segment:
    number: int
    path: Path
    fd: int | None
    size: int = 0
    waiting: int = 0
    """Records appended to it that the store has not committed yet."""


@dataclass
class ReplayReport:
    """What `Journal.replay` found and did."""

    owners: int = 0
    """Journals of processes that were gone."""
    replayed: int = 0
    """Records written to the store."""
    already_stored: int = 0
    """Entries the store had already committed (or a later record of the same exchange)."""
    torn: int = 0
    corrupt: int = 0
    """Entries whose frame was intact but whose record could not be read."""
    lost: int = 0
    """Entries flushed to disk (by the owner's state file) that were not found."""


class Journal:
    """The crash journal of one process. `replay` (once, before serving), then `open`;
    `append` on the event loop, `settled` from the recorder's writer thread; `close` at the end.

    Safe to share between threads: one lock guards the segments and the waiting records, held
    for one `os.write` at most (the flush to disk happens outside it).
    """

    def __init__(
        self,
        directory: Path,
        *,
        registry: CollectorRegistry,
        bodies_policy: str,
        fsync_interval_s: float = 1.0,
        max_body_bytes: int = 0,
        max_bytes: int = 1 << 30,
        segment_bytes: int = SEGMENT_BYTES,
    ) -> None:
        if fsync_interval_s <= 0 or max_body_bytes < 0 or segment_bytes < 1 or max_bytes < 1:
            raise ValueError("the journal needs fsync_interval_s > 0 and positive sizes")
        self.directory = directory
        self._policy = bodies_policy
        self._fsync_interval_s = fsync_interval_s
        self._max_body_bytes = max_body_bytes
        self._max_bytes = max_bytes
        self._segment_bytes = segment_bytes
        self.owner = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._segments: dict[int, _Segment] = {}
        self._current: _Segment | None = None
        self._waiting: dict[Key, int] = {}
        self._to_sync: list[int] = []
        """Descriptors of rotated segments, flushed and closed by the flush thread."""
        self._seq = 0
        self._last_segment = ""
        """The segment holding entry `_seq`."""
        self._synced_seq = 0
        self._bytes = 0
        self._lock_fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.metrics = JournalMetrics(registry)
        self._skipped_full = self.metrics.skipped.labels("full")
        self._skipped_error = self.metrics.skipped.labels("error")
        self.metrics.unsynced.set_function(lambda: self._seq - self._synced_seq)
        self.metrics.bytes.set_function(lambda: self._bytes)

    @classmethod
    def from_spec(cls, spec: StoreSpec, *, registry: CollectorRegistry) -> Journal | None:
        """The journal the `store:` section asks for; None when `journal` is false."""
        if not spec.journal:
            return None
        return cls(
            directory_for(spec),
            registry=registry,
            bodies_policy=spec.bodies,
            fsync_interval_s=spec.journal_fsync_interval_s,
            max_body_bytes=spec.journal_max_body_bytes,
            max_bytes=spec.journal_max_bytes,
        )

    # --- start ----------------------------------------------------------------------------------

    def replay(self, store: Store) -> ReplayReport:
        """Write to `store` what the journals of processes that are gone hold and it lacks, then
        delete those journals. Blocking (call it off the loop); a journal whose records cannot
        be written (the store is unavailable) is kept for the next start and logged."""
        report = ReplayReport()
        try:
            if not self.directory.is_dir():
                return report
            owners = sorted(self._owners())
        except OSError as exc:  # unreadable: `open` names the problem
            log.error("journal: cannot read %s: %s", self.directory, exc)
            return report
        for owner in owners:
            try:
                self._replay_orphan(owner, store, report)
            except Exception as exc:
                log.error("journal: could not replay %s (kept for the next start): %s",
                          owner, exc)  # fmt: skip
        if report.owners:
            self.metrics.unclean.inc(report.owners)
            self.metrics.replayed.inc(report.replayed)
            self.metrics.torn.inc(report.torn)
            self.metrics.lost.inc(report.lost)
            log.warning(
                "journal: %d journal(s) left by processes that did not stop: %d records "
                "replayed into the store, %d already there, %d torn frames, %d unreadable, "
                "%d flushed entries missing",
                report.owners, report.replayed, report.already_stored, report.torn,
                report.corrupt, report.lost,
            )  # fmt: skip
        return report

    def _replay_orphan(self, owner: str, store: Store, report: ReplayReport) -> None:
        with self._orphan(owner) as lock_fd:
            if lock_fd is None:
                return  # its process is alive
            report.owners += 1
            self._replay_owner(owner, store, report)
            self._remove_owner(owner)

    def _owners(self) -> set[str]:
        owners = set()
        for path in self.directory.iterdir():
            match = _SEGMENT.match(path.name)
            if match:
                owners.add(match["owner"])
            elif path.suffix in (".lock", ".state"):
                owners.add(path.stem)
        owners.discard(self.owner)
        return owners

    @contextlib.contextmanager
    def _orphan(self, owner: str) -> Iterator[int | None]:
        """The owner's lock, taken (its process is gone), or None (it is alive)."""
        fd = os.open(self.directory / f"{owner}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield None
                return
            yield fd
        finally:
            os.close(fd)

    def _segment_paths(self, owner: str) -> list[Path]:
        found = []
        for path in self.directory.iterdir():
            match = _SEGMENT.match(path.name)
            if match and match["owner"] == owner:
                found.append((int(match["n"]), path))
        return [path for _n, path in sorted(found)]

    def _replay_owner(self, owner: str, store: Store, report: ReplayReport) -> None:
        state = _read_state(self.directory / f"{owner}.state")
        records: dict[Key, ExchangeRecord] = {}
        for path in self._segment_paths(owner):
            contents = read_segment(path.read_bytes())
            report.torn += contents.torn
            if state is not None and path.name == state["segment"]:
                last = contents.entries[-1][0] if contents.entries else 0
                report.lost += max(0, int(state["synced_seq"]) - last)
            for _seq, payload in contents.entries:
                try:
                    record = decode(payload)
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("journal: unreadable entry in %s: %s", path.name, exc)
                    report.corrupt += 1
                    continue
                records[key_of(record)] = record  # a later entry of one exchange supersedes
        pending = list(records.values())
        for start in range(0, len(pending), _REPLAY_BATCH):
            chunk = pending[start : start + _REPLAY_BATCH]
            stored = store.exchange_keys(sorted({r.request_id for r in chunk}))
            fresh = [
                dataclasses.replace(r, tags=(*r.tags, REPLAYED_TAG))
                for r in chunk
                if key_of(r) not in stored
            ]
            store.write_batch(fresh)
            report.replayed += len(fresh)
            report.already_stored += len(chunk) - len(fresh)

    def _remove_owner(self, owner: str) -> None:
        for path in self._segment_paths(owner):
            path.unlink(missing_ok=True)
        (self.directory / f"{owner}.state").unlink(missing_ok=True)
        (self.directory / f"{owner}.state-new").unlink(missing_ok=True)
        (self.directory / f"{owner}.lock").unlink(missing_ok=True)

    def open(self) -> None:
        """Take this process's lock, open its first segment, start the flush thread. Raises
        `StoreError` naming the directory when it cannot be written."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Locked under another name, then renamed: a replay starting elsewhere never sees
            # this lock file unlocked and takes it for an orphan's.
            fresh = self.directory / f"{self.owner}.lock-new"
            self._lock_fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(fresh, self.directory / f"{self.owner}.lock")
            with self._lock:
                self._rotate()
        except OSError as exc:
            raise StoreError(
                f"the crash journal cannot be written in {self.directory} ({exc}): set "
                "store.journal_dir to a writable local directory, or store.journal: false"
            ) from exc
        self._thread = threading.Thread(target=self._run, name="mirrorgate-journal", daemon=True)
        self._thread.start()

    # --- event loop side ------------------------------------------------------------------------

    def append(self, record: StoredRecord) -> None:
        """Journal `record` (an exchange of the client path). One write syscall; never raises:
        a record the journal cannot take is counted and still goes to the store as before."""
        if not isinstance(record, ExchangeRecord) or self._current is None:
            return
        try:
            payload = encode(self._as_stored(record))
        except Exception:
            log.exception("journal: cannot serialise the record of %s", record.request_id)
            self._skipped_error.inc()
            return
        try:
            appended = self._append(key_of(record), payload)
        except OSError as exc:
            log.error("journal: could not append the record of %s: %s", record.request_id, exc)
            appended = False
        if appended:
            self.metrics.appended.inc()
        elif appended is False:
            self._skipped_error.inc()

    def _append(self, key: Key, payload: bytes) -> bool | None:
        """True: appended; None: not (closed, or full: counted); False: the write failed."""
        with self._lock:
            current = self._current
            if current is None:
                return None  # closed meanwhile
            if self._bytes + len(payload) > self._max_bytes:
                self._skipped_full.inc()
                return None
            if current.size and current.size + len(payload) > self._segment_bytes:
                current = self._rotate()
            fd = current.fd
            if fd is None:
                return None
            data = frame(self._seq + 1, payload)
            written = os.write(fd, data)
            if written != len(data):
                # A short write (disk full) leaves a torn frame: the replay stops at it, so
                # nothing more may follow it in this segment.
                self._rotate()
                log.error("journal: %d of %d bytes written to %s", written, len(data),
                          current.path.name)  # fmt: skip
                return False
            self._seq += 1
            self._last_segment = current.path.name
            current.size += written
            current.waiting += 1
            self._bytes += written
            if self._waiting.get(key) is not None:
                self._settle_locked(key)  # the same exchange again: the newer entry counts
            self._waiting[key] = current.number
            return True

    def _as_stored(self, record: ExchangeRecord) -> ExchangeRecord:
        bodies = (record.request_body, record.response_body, record.response_text)
        if bodies == (None, None, None):
            return record
        if sum(len(b) for b in bodies if b is not None) > self._max_body_bytes:
            self.metrics.bodies_omitted.inc()
            return dataclasses.replace(
                record, request_body=None, response_body=None, response_text=None
            )
        return apply_bodies_policy(record, self._policy)

    # --- writer thread side ---------------------------------------------------------------------

    def settled(self, records: Sequence[StoredRecord]) -> None:
        """The store committed (or refused for good) `records`: their entries are no longer
        needed. Records the journal never held are ignored. The lock is taken for a few dozen
        records at a time, so that an append on the event loop never waits for a whole batch."""
        keys = [key_of(r) for r in records if isinstance(r, ExchangeRecord)]
        for start in range(0, len(keys), _SETTLE_CHUNK):
            with self._lock:
                for key in keys[start : start + _SETTLE_CHUNK]:
                    self._settle_locked(key)

    def _settle_locked(self, key: Key) -> None:
        number = self._waiting.pop(key, None)
        if number is None:
            return
        segment = self._segments.get(number)
        if segment is None:
            return
        segment.waiting -= 1
        if segment.waiting > 0:
            return
        if segment is not self._current:
            self._delete_locked(segment)
        elif segment.size >= _RECYCLE_BYTES:
            self._rotate()  # everything in it is stored: start afresh, and the old one goes

    def _delete_locked(self, segment: _Segment) -> None:
        self._segments.pop(segment.number, None)
        segment.path.unlink(missing_ok=True)
        self._bytes -= segment.size
        if segment.fd is not None:
            self._to_sync.append(segment.fd)  # closed by the flush thread
            segment.fd = None

    def _rotate(self) -> _Segment:
        """Start a new segment (lock held); the old one is flushed and closed by the thread,
        and deleted at once if nothing in it is waiting."""
        old = self._current
        number = old.number + 1 if old is not None else 1
        path = self.directory / f"{self.owner}-{number:06d}.seg"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        segment = _Segment(number, path, fd)
        self._segments[number] = segment
        self._current = segment
        if old is not None:
            if old.waiting <= 0:
                self._delete_locked(old)
            elif old.fd is not None:
                self._to_sync.append(old.fd)
                old.fd = None
        return segment

    # --- flush thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self._fsync_interval_s):
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            current = self._current
            seq, segment_name = self._seq, self._last_segment
            rotated, self._to_sync = self._to_sync, []
            fd = None if current is None or current.fd is None else os.dup(current.fd)
        try:
            for old in rotated:
                with contextlib.suppress(OSError):
                    os.fsync(old)
                os.close(old)
            if fd is None or seq == self._synced_seq:
                return
            os.fsync(fd)  # the rotated segments were flushed just above
            _write_state(
                self.directory / f"{self.owner}.state",
                {"synced_seq": seq, "segment": segment_name},
            )
            self._synced_seq = seq
        except OSError as exc:
            log.error("journal: could not flush to disk: %s", exc)
        finally:
            if fd is not None:
                os.close(fd)

    # --- end ------------------------------------------------------------------------------------

    def waiting(self) -> int:
        """Journaled records the store has not committed yet."""
        return len(self._waiting)

    def close(self) -> None:
        """Flush and stop. When the store has every record, the files are deleted; otherwise
        they stay for the next start to replay (what the recorder could not write in time)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._flush()
        with self._lock:
            segments = list(self._segments.values())
            keep = bool(self._waiting)
            self._current = None
            for segment in segments:
                if segment.fd is not None:
                    os.close(segment.fd)
                    segment.fd = None
                if not keep:
                    segment.path.unlink(missing_ok=True)
            self._segments.clear()
            for fd in self._to_sync:
                os.close(fd)
            self._to_sync = []
        if keep:
            log.warning("journal: %d records not in the store are kept in %s for the next start",
                        len(self._waiting), self.directory)  # fmt: skip
        else:
            (self.directory / f"{self.owner}.state").unlink(missing_ok=True)
            (self.directory / f"{self.owner}.lock").unlink(missing_ok=True)
            self._bytes = 0
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock: the next start replays what is kept
            self._lock_fd = None


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(state, dict) or not {"synced_seq", "segment"} <= state.keys():
        return None
    return state


def _write_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file whole (write, flush, rename): a crash leaves the old or the new."""
    tmp = path.with_suffix(".state-new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, orjson.dumps(state))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
