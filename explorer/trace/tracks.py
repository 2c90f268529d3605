"""Timeline rows: which (pid, tid) is a host thread and which is a device stream, what
a person should read as its name, and in what order the rows are shown.

Kineto puts device work on ``pid = device``, ``tid = stream`` and host work on the real
process and thread ids; names and order come from the ``process_name``, ``thread_name``
and ``*_sort_index`` metadata events when the file has them.
"""

from __future__ import annotations

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
        self.codes, uniq = pd.factorize(pair)
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
    # Metadata names and sort indexes.
    proc_name: dict[str, str] = {}
    proc_labels: dict[str, str] = {}  # torch writes "GPU 0" here for device processes
    proc_sort: dict[str, float] = {}
    thread_name: dict[tuple[str, str], str] = {}
    thread_sort: dict[tuple[str, str], float] = {}
    for i, a in ev.meta_args:
        name = ev.name_text(i)
        pid, tid = strings([ev.pids.values[ev.pid[i]], ev.tids.values[ev.tid[i]]])
        if name == "process_name" and a.get("name") is not None:
            proc_name[pid] = str(a["name"]).strip()
        elif name == "process_labels" and a.get("labels"):
            proc_labels[pid] = str(a["labels"]).strip()
        elif name == "process_sort_index" and isinstance(a.get("sort_index"), (int, float)):
            proc_sort[pid] = float(a["sort_index"])
        elif name == "thread_name" and a.get("name") is not None:
            thread_name[(pid, tid)] = str(a["name"]).strip()
        elif name == "thread_sort_index" and isinstance(a.get("sort_index"), (int, float)):
            thread_sort[(pid, tid)] = float(a["sort_index"])

    dev_cat = np.array([str(c).lower() in DEVICE_CATEGORIES for c in s_cat.categories] + [False])
    s_is_dev = dev_cat[s_cat.codes]
    n_keys = len(keys.final)
    dev_count = np.bincount(s_key, weights=s_is_dev, minlength=n_keys)
    # Most common device / stream id on each key, from the slices' args.
    key_device = _mode_per_key(s_key, device, n_keys)
    key_stream = _mode_per_key(s_key, stream, n_keys)

    rank = (
        meta.get("distributedInfo", {}).get("rank", -1)
        if isinstance(meta.get("distributedInfo"), dict)
        else -1
    )
    rows = []
    for k in used:
        pid_v, tid_v = keys.pid_of_key(k), keys.tid_of_key(k)
        pid, tid = strings([pid_v, tid_v])
        is_dev = dev_count[k] > 0
        pid_i, tid_i = _int_or_none(pid_v), _int_or_none(tid_v)
        if is_dev:
            dev = key_device[k] if key_device[k] >= 0 else (pid_i if pid_i is not None else -1)
            stm = tid_i if tid_i is not None else key_stream[k]
            process = proc_labels.get(pid) or _device_name(proc_name.get(pid)) or f"GPU {dev}"
            tname = thread_name.get((pid, tid)) or f"stream {stm}"
            if tname.lower().startswith("stream") and tname.lower() == tname.lower().strip():
                tname = tname.strip()
            label = f"{process} / {tname}"
            order_key = (
                1,
                proc_sort.get(pid, 1e12 + dev),
                thread_sort.get((pid, tid), stm if stm is not None else 0),
            )
            ttype = "device_stream"
        else:
            dev, stm = -1, -1
            pname = proc_name.get(pid)
            process = (
                f"{pname} ({pid})"
                if pname and pid_i is not None
                else (pname or (f"process {pid}" if pid else "process"))
            )
            tname = thread_name.get((pid, tid)) or (f"thread {tid}" if tid else "thread")
            label = f"{process} / {tname}"
            host_first = 0 if pid_i is not None else 2
            main_first = 0 if pid == tid else 1
            order_key = (
                host_first,
                proc_sort.get(pid, float(pid_i) if pid_i is not None else 1e15),
                thread_sort.get(
                    (pid, tid), main_first * 1e15 + (tid_i if tid_i is not None else 0)
                ),
            )
            ttype = "host_thread" if pid_i is not None else "other"
        rows.append(
            (
                k,
                pid,
                tid,
                process,
                tname,
                label,
                ttype,
                dev,
                stm if stm is not None else -1,
                order_key,
            )
        )
    rows.sort(key=lambda r: (r[9][0], r[9][1], r[3], r[9][2], r[2]))
    tracks = pd.DataFrame(
        {
            "id": np.arange(len(rows), dtype=np.int32),
            "pid": [r[1] for r in rows],
            "tid": [r[2] for r in rows],
            "process": [r[3] for r in rows],
            "thread": [r[4] for r in rows],
            "label": [r[5] for r in rows],
            "type": pd.Categorical([r[6] for r in rows], categories=TRACK_TYPE_CATEGORIES),
            "device": np.array([r[7] for r in rows], np.int64),
            "stream": np.array([r[8] for r in rows], np.int64),
            "rank": np.full(len(rows), rank if isinstance(rank, int) else -1, np.int64),
            "order": np.arange(len(rows), dtype=np.int64),
        }
    )
    for new_id, r in enumerate(rows):
        keys.final[r[0]] = new_id
    return tracks, keys.final[s_key]


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
