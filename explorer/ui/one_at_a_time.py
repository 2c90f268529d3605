"""One analysis at a time: the viewer's worker threads take turns at the heavy work.

The viewer computes its analyses in one worker thread (:class:`~explorer.ui.loader.
AnalysisRunner`) and each panel's aggregation in Qt's thread pool. Over millions of rows
that work is numpy holding the GIL for most of its time, so running several at once is
hardly faster, but their temporaries are all alive at once: on a 1M-slice H100 trace
the dependency graph (~200 MB of temporaries) and the Operators panel (~150 MB) overlapped
and made the viewer's peak. Taking turns, each analysis and each panel job holds
:data:`HEAVY_WORK` while it runs, so the peak is the largest one's, not their sum.

No deadlock: the lock is taken only at the top of a job, never while the memo's entry
lock of a result is held, and a job waiting for another's result
(:meth:`~explorer.trace.memo.Memo.compute`) waits only inside its own turn.
"""

from __future__ import annotations

import threading

#: Held by each analysis of the runner and each panel's background job while it runs.
HEAVY_WORK = threading.RLock()

__all__ = ["HEAVY_WORK"]
