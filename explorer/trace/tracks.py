"""Timeline rows: which (pid, tid) is a host thread and which is a device stream, what
a person should read as its name, and in what order the rows are shown.

Kineto puts device work on ``pid = device``, ``tid = stream`` and host work on the real
process and thread ids; names and order come from the ``process_name``, ``thread_name``
and ``*_sort_index`` metadata events when the file has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from explorer.trace.columns import strings
from explorer.trace.events import EventColumns
from explorer.trace.kinds import DEVICE_CATEGORIES

TRACK_TYPE_CATEGORIES = ["host_thread", "device_stream", "counter", "other"]


class TrackKeys:
    """Track codes for events, from their (pid, tid) exactly as written."""

    def __init__(self, ev: EventColumns) -> None:
        self._ev = ev
        n_tid = max(len(ev.tids.values), 1)
        pair = ev.pid.astype(np.int64) * n_tid + ev.tid
        codes, uniq = pd.factorize(pair)
        del pair
        self.codes = codes.astype(np.int32)  # half the size: a 10M-event trace's column
        self._pair_pid = (uniq // n_tid).astype(np.int64)
        self._pair_tid = (uniq % n_tid).astype(np.int64)
        #: key → final track id (filled by :func:`build_tracks`), -1 for keys with no track.
        self.final: np.ndarray = np.full(len(uniq), -1, np.int64)

    def event_track(self, idx: np.ndarray) -> np.ndarray:
        return self.codes[idx].astype(np.int64)

    def pid_of_key(self, key: int) -> Any:
        return self._ev.pids.values[self._pair_pid[key]]

    def tid_of_key(self, key: int) -> Any:
        return self._ev.tids.values[self._pair_tid[key]]

    def track_of_events(self, idx: np.ndarray) -> np.ndarray:
        """Final track id of each event (-1 when its (pid, tid) has no track)."""
        if len(idx) == 0:
            return np.empty(0, np.int64)
        return self.final[self.codes[idx]]


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return None
    return None


@dataclass
class TrackNames:
    """What the file's metadata events say about processes and threads."""

    process: dict[str, str] = field(default_factory=dict)
    process_labels: dict[str, str] = field(default_factory=dict)  # "GPU 0" for devices
    process_sort: dict[str, float] = field(default_factory=dict)
    thread: dict[tuple[str, str], str] = field(default_factory=dict)
    thread_sort: dict[tuple[str, str], float] = field(default_factory=dict)


@dataclass
class TrackRow:
    """One timeline row before ids are given out (ids follow the display order)."""

    key: int
    pid: str
    tid: str
    process: str
    thread: str
    label: str
    type: str
    device: int
    stream: int
    order: tuple[float, float, float]


def build_tracks(
    keys: TrackKeys,
    s_idx: np.ndarray,
    s_cat: pd.Categorical,
    device: np.ndarray,
    stream: np.ndarray,
    extra_idx: np.ndarray,
    ev: EventColumns,
    meta: dict[str, Any],
) -> tuple[pd.DataFrame, np.ndarray]:
    """The tracks table (display-ordered ids) and each slice's track id."""
    s_key = keys.event_track(s_idx)
    used = np.unique(np.concatenate([s_key, keys.event_track(extra_idx)]))
    names = track_names(ev)
    dev_cat = np.array([str(c).lower() in DEVICE_CATEGORIES for c in s_cat.categories] + [False])
    n_keys = len(keys.final)
    dev_count = np.bincount(s_key, weights=dev_cat[s_cat.codes], minlength=n_keys)
    # Most common device / stream id on each key, from the slices' args.
    key_device = _mode_per_key(s_key, device, n_keys)
    key_stream = _mode_per_key(s_key, stream, n_keys)
    rows = [
        _device_row(keys, int(k), names, int(key_device[k]), int(key_stream[k]))
        if dev_count[k] > 0
        else _host_row(keys, int(k), names)
        for k in used
    ]
    rows.sort(key=lambda r: (r.order[0], r.order[1], r.process, r.order[2], r.tid))
    tracks = _tracks_table(rows, _rank(meta))
    for new_id, r in enumerate(rows):
        keys.final[r.key] = new_id
    return tracks, keys.final[s_key]


def track_names(ev: EventColumns) -> TrackNames:
    """Process and thread names and sort indexes from the ``M`` events."""
    out = TrackNames()
    for i, a in ev.meta_args:
        name = ev.name_text(i)
        pid, tid = strings([ev.pids.values[ev.pid[i]], ev.tids.values[ev.tid[i]]])
        if name == "process_name" and a.get("name") is not None:
            out.process[pid] = str(a["name"]).strip()
        elif name == "process_labels" and a.get("labels"):
            out.process_labels[pid] = str(a["labels"]).strip()
        elif name == "process_sort_index" and isinstance(a.get("sort_index"), (int, float)):
            out.process_sort[pid] = float(a["sort_index"])
        elif name == "thread_name" and a.get("name") is not None:
            out.thread[(pid, tid)] = str(a["name"]).strip()
        elif name == "thread_sort_index" and isinstance(a.get("sort_index"), (int, float)):
            out.thread_sort[(pid, tid)] = float(a["sort_index"])
    return out


def _device_row(keys: TrackKeys, k: int, names: TrackNames, key_dev: int, key_stm: int) -> TrackRow:
    """A device stream or queue: Kineto writes ``pid = device``, ``tid = stream``."""
    pid_v, tid_v = keys.pid_of_key(k), keys.tid_of_key(k)
    pid, tid = strings([pid_v, tid_v])
    pid_i, tid_i = _int_or_none(pid_v), _int_or_none(tid_v)
    dev = key_dev if key_dev >= 0 else (pid_i if pid_i is not None else -1)
    stm = tid_i if tid_i is not None else key_stm
    process = names.process_labels.get(pid) or _device_name(names.process.get(pid)) or f"GPU {dev}"
    thread = names.thread.get((pid, tid)) or f"stream {stm}"
    order = (1.0, names.process_sort.get(pid, 1e12 + dev), names.thread_sort.get((pid, tid), stm))
    return TrackRow(k, pid, tid, process, thread, f"{process} / {thread}", "device_stream", dev,
                    stm, order)  # fmt: skip


def _host_row(keys: TrackKeys, k: int, names: TrackNames) -> TrackRow:
    """A host thread (integer pid), or another row (Kineto's ``Spans`` process...)."""
    pid_v, tid_v = keys.pid_of_key(k), keys.tid_of_key(k)
    pid, tid = strings([pid_v, tid_v])
    pid_i, tid_i = _int_or_none(pid_v), _int_or_none(tid_v)
    pname = names.process.get(pid)
    if pname and pid_i is not None:
        process = f"{pname} ({pid})"
    else:
        process = pname or (f"process {pid}" if pid else "process")
    thread = names.thread.get((pid, tid)) or (f"thread {tid}" if tid else "thread")
    main_first = 0 if pid == tid else 1
    order = (
        0.0 if pid_i is not None else 2.0,
        names.process_sort.get(pid, float(pid_i) if pid_i is not None else 1e15),
        names.thread_sort.get((pid, tid), main_first * 1e15 + (tid_i if tid_i is not None else 0)),
    )
    kind = "host_thread" if pid_i is not None else "other"
    return TrackRow(k, pid, tid, process, thread, f"{process} / {thread}", kind, -1, -1, order)


def _rank(meta: dict[str, Any]) -> int:
    info = meta.get("distributedInfo")
    rank = info.get("rank", -1) if isinstance(info, dict) else -1
    return rank if isinstance(rank, int) else -1


def _tracks_table(rows: list[TrackRow], rank: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": np.arange(len(rows), dtype=np.int32),
            "pid": [r.pid for r in rows],
            "tid": [r.tid for r in rows],
            "process": [r.process for r in rows],
            "thread": [r.thread for r in rows],
            "label": [r.label for r in rows],
            "type": pd.Categorical([r.type for r in rows], categories=TRACK_TYPE_CATEGORIES),
            "device": np.array([r.device for r in rows], np.int64),
            "stream": np.array([r.stream for r in rows], np.int64),
            "rank": np.full(len(rows), rank, np.int64),
            "order": np.arange(len(rows), dtype=np.int64),
        }
    )


def _device_name(process_name: str | None) -> str | None:
    """A device process's own name when it names a device ("GPU 0", "MTIA 17"), not the
    host program's ("python3")."""
    if process_name and any(ch.isdigit() for ch in process_name) and " " in process_name:
        return process_name
    return None


def _mode_per_key(key: np.ndarray, value: np.ndarray, n_keys: int) -> np.ndarray:
    """The most frequent non-negative value per key (-1 when none), vectorised."""
    out = np.full(n_keys, -1, np.int64)
    ok = value >= 0
    if not ok.any():
        return out
    df = pd.DataFrame({"k": key[ok], "v": value[ok]})
    counts = (
        df.groupby(["k", "v"])
        .size()
        .reset_index(name="n")
        .sort_values(["k", "n"], ascending=[True, False])
    )
    first = counts.drop_duplicates("k")
    out[first["k"].to_numpy()] = first["v"].to_numpy()
    return out
