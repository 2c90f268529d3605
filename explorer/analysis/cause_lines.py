"""The user line where a cause's time is spent: the statement, not the function.

torch's Python tracer names a frame by the line its function starts at (``def forward``),
or, for the frames already running when profiling starts, by the line running then (the
``with explorer.collect(...)`` line of the training loop). Neither is where the time goes.
The time goes to what the frame *called*: the slices just under the user frame — a
library function (``serialization.py(...): save``), a builtin (``<built-in function
sleep>``), an operator (``aten::matmul``), the DataLoader's ``__next__``. Each of those is
matched against the statements of the user's function in its source file (:mod:`ast`:
the calls, operators, ``for`` loops and string literals of each statement), and the time
under it goes to that statement's line.

:func:`statement_ns` does this for every slice of a trace: each slice's exclusive host
time (the deepest running slice owns each instant) goes to its statement line; device
work goes to the statement that launched it. :func:`cause_lines` ranks the statements of
a set of slices (a cause's slices and everything they called); the single-trace detectors
and the job's straggler causes both read it, so a cause has one line wherever it is shown.

The source is read where the report runs: at the recorded path, else under the current
directory (a checkout of the same code). When it cannot be read, or no statement of the
function matches, the frame's own line is kept — except the line of ``with
explorer.collect(...)``, which never holds the time: there the loop under it is used.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from explorer.analysis.attribution import frame_codes, heaviest_lines, launcher
from explorer.analysis.breakdown import (
    DEVICE_REASONS,
    HOST_REASONS,
    device_slice_reasons,
    host_slice_reasons,
)
from explorer.analysis.by_source import exclusive_ns
from explorer.analysis.classify import classes
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData

Line = tuple[str, int, str]

#: Operators whose Python spelling is an operator, not a call.
_BINOPS: dict[type, tuple[str, ...]] = {
    ast.MatMult: ("matmul", "mm", "bmm", "addmm", "__matmul__"),
    ast.Mult: ("mul", "__mul__"),
    ast.Add: ("add", "__add__"),
    ast.Sub: ("sub", "rsub", "__sub__"),
    ast.Div: ("div", "__truediv__"),
    ast.Pow: ("pow", "__pow__"),
}
#: What iterating in a ``for`` statement calls.
_FOR_NAMES = ("__next__", "__iter__", "next", "iter", "dataloader")
_BUILTIN = re.compile(r"^<built-in (?:method|function) (\w+)")
_PYFRAME = re.compile(r"^.+\(\d+\): (\w+)$")
_ATEN = re.compile(r"^\w+::(\w+?)_?$")
_NEXT = re.compile(r"__next__|DataLoader", re.I)
#: Host I/O: checkpointing and file writes, as torch's Python tracer names the calls.
HOST_IO = re.compile(
    r"serialization\.py\(\d+\): (save|_save)$|^<built-in method (write|flush|dump) of"
    r"|^<built-in function (fsync|write|dump)>|pickle\.py\(\d+\): dump"
)


def callee_name(name: str) -> str:
    """What a slice under a user frame is called in the user's code:
    ``<built-in function sleep>`` → ``sleep``, ``torch/serialization.py(913): save`` →
    ``save``, ``aten::add_`` → ``add``, ``enumerate(DataLoader)#...__next__`` →
    ``__next__``; else the name itself (an annotation's text)."""
    if _NEXT.search(name) and not name.startswith("<"):
        return "__next__"
    for rx in (_BUILTIN, _PYFRAME, _ATEN):
        m = rx.match(name)
        if m:
            return m.group(1)
    return name


@dataclass(frozen=True)
class _Function:
    first: int  # the def line
    last: int
    #: statement line -> the names it calls or spells (calls, operators, literals)
    names: tuple[tuple[int, frozenset[str]], ...]
    #: lines of ``with ...collect(...)`` statements, and the first ``for`` inside each
    collect_loops: tuple[tuple[int, int], ...]
    name: str = ""


@lru_cache(maxsize=64)
def _parsed(path: str, mtime: float) -> tuple[_Function, ...]:
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return ()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(_function(node))
    mod_body = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    if mod_body:  # module-level code ("<module>")
        out.append(_function(ast.Module(body=mod_body, type_ignores=[]), first=1))
    return tuple(out)


def _function(fn: ast.AST, first: int | None = None) -> _Function:
    names: dict[int, set[str]] = {}
    loops: list[tuple[int, int]] = []
    body = getattr(fn, "body", [])

    def visit(node: ast.AST, stmt_line: int) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return  # their own frames
        if isinstance(node, ast.stmt):
            stmt_line = node.lineno
        here = names.setdefault(stmt_line, set())
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                here.add(f.attr)
            elif isinstance(f, ast.Name):
                here.add(f.id)
        elif isinstance(node, (ast.BinOp, ast.AugAssign)):
            here.update(_BINOPS.get(type(node.op), ()))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            here.update(_FOR_NAMES)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            here.add(node.value)
        if isinstance(node, (ast.With, ast.AsyncWith)) and _is_collect(node):
            inner = next((n for n in ast.walk(node) if isinstance(n, (ast.For, ast.While))), None)
            if inner is not None:
                loops.append((node.lineno, inner.lineno))
        for child in ast.iter_child_nodes(node):
            # a statement's header (a for's target and iterable, a with's items) is its
            # own line; the statements of its body are theirs
            visit(child, stmt_line)

    for stmt in body:
        visit(stmt, stmt.lineno)
    # a decorated function's code starts at its first decorator (co_firstlineno)
    decorators = [d.lineno for d in getattr(fn, "decorator_list", [])]
    start = first if first is not None else min([getattr(fn, "lineno", 1), *decorators])
    last = max([start, *names], default=start)
    last = max(last, getattr(fn, "end_lineno", last) or last)
    return _Function(
        start, last, tuple((k, frozenset(v)) for k, v in sorted(names.items())), tuple(loops),
        str(getattr(fn, "name", "<module>")),
    )  # fmt: skip


def _is_collect(node: ast.With | ast.AsyncWith) -> bool:
    for item in node.items:
        call = item.context_expr
        if isinstance(call, ast.Call):
            f = call.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name == "collect":
                return True
    return False


def source_file(path: str, near: str = "") -> str | None:
    """Where the source of a traced file is readable here: the recorded path, else — a
    trace captured on another machine or checkout — a file of that name beside the trace
    (``near``: the trace's directory), else the same file under the current directory (its
    last three, two or one path components), else None."""
    if os.path.isfile(path):
        return path
    parts = [p for p in re.split(r"[\\/]", path) if p]
    if near and parts and os.path.isfile(os.path.join(near, parts[-1])):
        return os.path.join(near, parts[-1])
    for k in (3, 2, 1):
        if len(parts) >= k:
            here = os.path.join(os.getcwd(), *parts[-k:])
            if os.path.isfile(here):
                return here
    return None


def _function_at(recorded: str, line: int, function: str, near: str) -> _Function | None:
    path = source_file(recorded, near)
    if path is None:
        return None
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    best = None
    for fn in _parsed(path, mtime):
        if fn.first <= line <= fn.last and (best is None or fn.first >= best.first):
            best = fn  # the innermost function holding the line
    if best is None or (function and best.name != function):
        return None  # the file changed since the trace was taken: its lines are not these
    return best


def statement_line(
    path: str, line: int, callees: list[tuple[str, float]], function: str = "", near: str = ""
) -> int:
    """The line of the statement of the function ``function`` at ``path:line`` that calls
    what ``callees`` (names, heaviest first) name; ``line`` when none matches, the source
    cannot be read (see :func:`source_file`; ``near`` is the trace's directory) or no
    longer has that function there. A frame at a ``with explorer.collect(...)`` line
    moves to the loop inside it."""
    fn = _function_at(path, line, function, near)
    if fn is None:
        return line
    for name, _ in callees:
        hits = [ln for ln, ns in fn.names if name in ns]
        if hits:
            # A frame named by its running line (the frames live when profiling began)
            # runs at or after it: prefer those statements.
            after = [h for h in hits if h >= line]
            return (after or hits)[0]
    for with_line, loop_line in fn.collect_loops:
        if with_line == line:
            return loop_line
    return line


@memoised("statement_codes", depends_on=("frame_codes", "launcher"))
def statement_codes(trace: TraceData) -> tuple[np.ndarray, pd.DataFrame]:
    """(code per slice, statements table ``file, line, function``): each slice's user
    frame refined to the statement that led to it (see the module doc). Device slices
    take the statement of the host call that launched them. Cached on the trace."""
    code, frames = frame_codes(trace)
    n = len(code)
    s = trace.slices
    if n == 0 or len(frames) == 0:
        return np.full(n, -1, np.int64), pd.DataFrame({"file": [], "line": [], "function": []})
    parent = s["parent"].to_numpy(np.int64).copy()
    # Whole-step spans (ProfilerStep#N) sit between the loop's frame and what it calls:
    # look through them.
    span = classes(trace).span
    for _ in range(4):
        through = (parent >= 0) & span[np.clip(parent, 0, None)]
        if not through.any():
            break
        parent[through] = s["parent"].to_numpy(np.int64)[parent[through]]
    has = parent >= 0
    pcode = np.full(n, -1, np.int64)
    pcode[has] = code[parent[has]]
    # The slice right under its user frame: it has the frame's code and its parent either
    # a different code (the frame itself is the parent's user frame) or — the frame's own
    # python slice — the same code while being that frame. A slice under it inherits it.
    python = trace.kind_in("python")
    own_frame = python & (code >= 0) & (pcode != code)  # the user frame's own slice
    head = (code >= 0) & has & (pcode == code) & own_frame_parent(own_frame, parent, has)
    callee = np.where(head, np.arange(n), -1)
    callee = trace.inherit_down(callee, keep=head | (code < 0) | own_frame | (pcode != code) | span)
    callee[(code < 0) | own_frame | span] = -1
    # what s["name"].astype(str) holds, one string per name shared by its slices
    cat = s["name"].array
    names = np.append(np.asarray(cat.categories.astype(str), dtype=object), "nan")[cat.codes]
    label = _callee_labels(names, np.flatnonzero(head), parent, python)
    rows = np.flatnonzero(callee >= 0)
    new_line = frames["line"].to_numpy(np.int64).copy()
    files = frames["file"].astype(str).to_numpy()
    funcs = frames["function"].astype(str).to_numpy()
    near = os.path.dirname(trace.path)
    # The frame's own line, when nothing under it names a statement: a collect line moves
    # to its loop.
    fallback = [
        statement_line(files[c], int(new_line[c]), [], funcs[c], near) for c in range(len(frames))
    ]
    line_of = np.array(fallback, np.int64)[np.clip(code, 0, None)]
    line_of[code < 0] = -1
    if len(rows):
        # Each distinct (frame, callee name) looked up once, then given to its slices: a
        # Python loop over the slices (their names read back one by one from an Arrow
        # column) took 0.3 s of a 100k-slice H100 trace's 0.4.
        heads, head_of = np.unique(callee[rows], return_inverse=True)
        name_of_head, callee_names = pd.factorize(
            np.array([label[int(i)] for i in heads], dtype=object)
        )
        width = max(len(callee_names), 1)
        pair_of, pairs = pd.factorize(code[rows] * width + name_of_head[head_of])
        got = np.array(
            [
                statement_line(
                    files[c], int(new_line[c]), [(str(callee_names[k]), 0.0)], funcs[c], near
                )
                for c, k in zip((pairs // width).tolist(), (pairs % width).tolist(), strict=True)
            ],
            np.int64,
        )[pair_of]
        ok = got >= 0
        line_of[rows[ok]] = got[ok]
    src = launcher(trace)
    on_dev = trace.on_device()
    dev = np.flatnonzero(on_dev & (src >= 0))
    line_of[dev] = line_of[src[dev]]
    known = np.flatnonzero(code >= 0)
    out = np.full(n, -1, np.int64)
    if len(known):
        # A statement is (file, line, function): the frame's file and function (one id per
        # distinct pair of the frames table) with the refined line, numbered in order of
        # first appearance.
        place, _ = pd.MultiIndex.from_arrays([files, funcs]).factorize()
        line = line_of[known]
        low = int(line.min())
        codes, _ = pd.factorize(place[code[known]] * (int(line.max()) - low + 1) + (line - low))
        first = known[np.unique(codes, return_index=True)[1]]
        out[known] = codes
        stmts = pd.DataFrame(
            {
                "file": files[code[first]],
                "line": line_of[first],
                "function": funcs[code[first]],
            }
        )
    else:
        stmts = pd.DataFrame({"file": [], "line": [], "function": []})
    return out, stmts


#: Decorators' inner functions, as the Python tracer names them: the user's code calls the
#: function they wrap (``dist.all_reduce`` is ``c10d_logger.py(80): wrapper`` around
#: ``distributed_c10d.py(3155): all_reduce``).
_WRAPPERS = frozenset(
    {"wrapper", "_wrapper", "inner", "_fn", "wrapped", "wrapped_fn", "decorate_context"}
)


def _callee_labels(
    names: np.ndarray, heads: np.ndarray, parent: np.ndarray, python: np.ndarray
) -> dict[int, str]:
    """Per slice right under a user frame (``heads``): its :func:`callee_name`, looking
    through decorator wrappers (:data:`_WRAPPERS`) to the first Python frame they call."""
    label = {int(i): callee_name(str(names[i])) for i in heads}
    wrapped = [i for i, nm in label.items() if nm in _WRAPPERS and _PYFRAME.match(names[i])]
    if not wrapped:
        return label
    kids = np.flatnonzero(python & (parent >= 0))
    first: dict[int, int] = {}
    for k in kids[::-1]:  # slices are in start order: the last write is the first child
        first[int(parent[k])] = int(k)
    for i in wrapped:
        j = i
        for _ in range(3):  # a wrapper around a wrapper
            j = first.get(j, -1)
            if j < 0:
                break
            nm = callee_name(str(names[j]))
            if nm not in _WRAPPERS:
                label[i] = nm
                break
    return label


def own_frame_parent(own_frame: np.ndarray, parent: np.ndarray, has: np.ndarray) -> np.ndarray:
    """Per slice: is its parent a user frame's own python slice?"""
    out = np.zeros(len(parent), bool)
    out[has] = own_frame[parent[has]]
    return out


def statement_ns(
    trace: TraceData, mask: np.ndarray | None = None, weights: np.ndarray | None = None
) -> pd.DataFrame:
    """Per statement line: ``ns`` of the slices in ``mask`` (all slices when None) —
    each host slice's exclusive time (or ``weights``), each device slice's duration —
    heaviest first. Columns ``file, line, function, ns``."""
    code, stmts = statement_codes(trace)
    n = len(code)
    m = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
    if weights is None:
        host = trace.on_host()
        w = exclusive_ns(trace, host & m).astype(float)
        dev = trace.on_device() & m
        w[dev] = trace.slices["dur"].to_numpy(np.int64)[dev]
    else:
        w = np.asarray(weights, float)
    ok = m & (code >= 0) & (w > 0)
    tot = np.bincount(code[ok], weights=w[ok], minlength=len(stmts))
    out = stmts.copy()
    out["line"] = out["line"].astype(np.int64)
    out["ns"] = tot.astype(np.int64)
    out = out[out["ns"] > 0]
    return out.sort_values("ns", ascending=False, kind="stable").reset_index(drop=True)


def cause_lines(
    trace: TraceData, ids: np.ndarray, weights: np.ndarray | None = None, top: int = 5
) -> list[Line]:
    """The statements where the time of the slices ``ids`` (bool mask or ids) and of
    everything they called is spent, heaviest first (the shared answer to "which line
    costs this cause's time"). ``weights`` (per id) scale each slice's subtree, e.g. by
    the part of it that overlaps the cause's measured time."""
    n = len(trace.slices)
    ids = np.flatnonzero(ids) if np.asarray(ids).dtype == bool else np.asarray(ids, np.int64)
    if len(ids) == 0:
        return []
    code, stmts = statement_codes(trace)
    if len(stmts) == 0:  # no slice has a statement (a trace without Python stacks)
        return []
    roots = np.zeros(n, bool)
    roots[ids] = True
    root_of = np.where(roots, np.arange(n), -1)
    root_of = trace.inherit_down(root_of, keep=roots)
    inside = root_of >= 0
    host = trace.on_host()
    w = exclusive_ns(trace, host & inside).astype(float)
    on_dev = trace.on_device()
    dur_all = trace.slices["dur"].to_numpy(np.int64)
    w[on_dev & inside] = dur_all[on_dev & inside]  # device slices among the roots
    dev = np.flatnonzero(on_dev & ~inside)
    if len(dev):  # device work launched from inside a root
        src = launcher(trace)[dev]
        ok = src >= 0
        dev, src = dev[ok], src[ok]
        from_root = inside[src]
        w[dev[from_root]] = trace.slices["dur"].to_numpy(np.int64)[dev[from_root]]
        root_of[dev[from_root]] = root_of[src[from_root]]
        inside[dev[from_root]] = True
    if weights is not None:
        scale = np.zeros(n)
        scale[ids] = np.asarray(weights, float)
        dur = np.maximum(trace.slices["dur"].to_numpy(np.int64)[ids], 1)
        scale[ids] = scale[ids] / dur  # the share of each root's time that counts
        w = w * np.where(inside, scale[np.clip(root_of, 0, None)], 0.0)
    return heaviest_lines(np.where(inside, code, -1), w, stmts, top)


def category_lines(trace: TraceData) -> pd.DataFrame:
    """Per breakdown category and statement: ``ns`` spent there (host slices: their
    exclusive time, classified as the breakdown classifies them; device slices: their
    duration, at the statement that launched them). Columns ``category, file, line,
    function, ns``, heaviest first. The job compares these across ranks to put a
    category's excess at its line. Host time inside a checkpoint or file write
    (:data:`HOST_IO`: ``torch.save``, ``pickle``, a file's ``write``) is category
    ``host_io`` here, whatever the breakdown calls it."""
    code, stmts = statement_codes(trace)
    n = len(code)
    cols = ["category", "file", "line", "function", "ns"]
    if n == 0 or len(stmts) == 0:
        return pd.DataFrame({c: [] for c in cols})
    on_dev = trace.on_device()
    device_mode = bool(on_dev.any())
    table = DEVICE_REASONS if device_mode else HOST_REASONS
    cats = sorted({c for _, c in table})
    cat_index = np.array([cats.index(c) for _, c in table], np.int64)
    reason = host_slice_reasons(trace, device_mode)
    cat = np.where(reason >= 0, cat_index[np.clip(reason, 0, None)], -1)
    w = exclusive_ns(trace, trace.on_host() & (reason >= 0)).astype(float)
    if device_mode:
        dreason = device_slice_reasons(trace)
        ok = on_dev & (dreason >= 0)
        cat[ok] = cat_index[dreason[ok]]
        w[ok] = trace.slices["dur"].to_numpy(np.int64)[ok]
    io = trace.name_matches(HOST_IO)
    io = trace.inherit_down(io, keep=io) & trace.on_host() & (cat >= 0)
    cats.append("host_io")
    cat[io] = len(cats) - 1
    keep = (cat >= 0) & (code >= 0) & (w > 0)
    df = pd.DataFrame({"cat": cat[keep], "code": code[keep], "w": w[keep]})
    per = df.groupby(["cat", "code"], sort=False)["w"].sum().reset_index()
    out = pd.DataFrame(
        {
            "category": pd.Series([cats[i] for i in per["cat"]], dtype=str),
            "file": stmts["file"].astype(str).to_numpy()[per["code"].to_numpy()],
            "line": stmts["line"].to_numpy(np.int64)[per["code"].to_numpy()],
            "function": stmts["function"].astype(str).to_numpy()[per["code"].to_numpy()],
            "ns": per["w"].to_numpy().astype(np.int64),
        },
        columns=cols,
    )
    return out.sort_values("ns", ascending=False, kind="stable").reset_index(drop=True)
