"""Reading a W&B run's transaction log (`run-<id>.wandb`) back in a test.

Offline runs keep their config, history and summary only there (no config.yaml or
wandb-summary.json in newer wandb): a 7-byte header (":W&B", magic, version) then
LevelDB-log-style records in 32 KiB blocks (4-byte checksum, 2-byte length, 1-byte type),
whose payloads are `wandb.proto.wandb_internal_pb2.Record` messages.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(path: Path) -> list[bytes]:
    """The records' payloads, with records split across blocks put back together."""
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    records, pending, offset = [], b"", HEADER
    while offset + 7 <= len(data):
        left_in_block = BLOCK - offset % BLOCK
        if left_in_block < 7:  # the block's tail is padding
            offset += left_in_block
            continue
        length, kind = struct.unpack_from("<HB", data, offset + 4)
        if offset + 7 + length > len(data):  # a record still being written
            break
        chunk = data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind == FULL:
            records.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            records.append(pending + chunk)
    return records


def read_run(path: Path, wait_s: float = 60.0) -> dict[str, Any]:
    """`{"config": {...}, "history": [{...}, ...], "summary": {...}}` as the run recorded them.

    `run.finish()` can return before wandb's service process has flushed the log's last block to
    disk (a loaded CI machine once read back an empty config), so the file is read again until its `exit` record is there, for up to `wait_s` seconds.
    """
    records = _records(path)
    deadline = time.monotonic() + wait_s
    while "exit" not in {kind for kind, _ in records} and time.monotonic() < deadline:
        time.sleep(0.2)
        records = _records(path)
    assert "exit" in {kind for kind, _ in records}, f"{path} has no exit record after {wait_s} s"
    run: dict[str, Any] = {"config": {}, "history": [], "summary": {}}
    for kind, record in records:
        if kind in ("run", "config"):  # a config given soon after init can ride in the run record itself
            config = record.run.config if kind == "run" else record.config
            run["config"].update({_key(item): json.loads(item.value_json) for item in config.update
                                  if not _key(item).startswith("_")})
        elif kind == "history":
            run["history"].append({_key(item): json.loads(item.value_json) for item in record.history.item})
        elif kind == "summary":
            run["summary"].update({_key(item): json.loads(item.value_json) for item in record.summary.update})
    return run


def _records(path: Path) -> list[tuple[str, Any]]:
    """Each record's kind (`run`, `config`, `history`, `exit`...) and the parsed record."""
    from wandb.proto import wandb_internal_pb2 as pb

    parsed = []
    for payload in payloads(path):
        record = pb.Record()
        record.ParseFromString(payload)
        parsed.append((record.WhichOneof("record_type") or "", record))
    return parsed


def _key(item: Any) -> str:
    """An item's name: `key`, or its `nested_key` parts joined with "/" (newer wandb uses these)."""
    return item.key or "/".join(item.nested_key)
