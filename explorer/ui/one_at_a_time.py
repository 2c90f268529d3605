"""Taking turns at the heavy work: the dependency graph is never built while a panel's
background job runs.

The viewer computes its analyses in one worker thread (:class:`~explorer.ui.loader.
AnalysisRunner`) and each panel's aggregation in Qt's thread pool. Over millions of rows
that work is numpy holding the GIL for most of its time, so running several at once is
hardly faster, but their temporaries are all alive at once: on a 1M-slice H100 trace the
dependency graph (~200 MB of temporaries) and the Operators panel (~150 MB) overlapped and
made the viewer's peak. Each panel job, and each analysis of
:data:`~explorer.ui.loader.TAKES_TURNS` (the graph), holds :data:`HEAVY_WORK` while it
runs, so that peak is the larger one's, not their sum: 903 -> 776 MB. Every analysis
taking turns was measured slower (ready 6.5 -> 7.6 s) and no lower (834 MB): the others
overlap the panels' jobs, as before.

No deadlock: the lock is taken only at the top of a job, never while the memo's entry
lock of a result is held, and a job waiting for another's result
(:meth:`~explorer.trace.memo.Memo.compute`) waits only inside its own turn.
"""

from __future__ import annotations

import threading

#: Held by each panel's background job, and by the analyses that take turns, while they run.
HEAVY_WORK = threading.Lock()

__all__ = ["HEAVY_WORK"]
