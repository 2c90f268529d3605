"""The desktop explorer: Qt views over a :class:`~explorer.Trace`.

This is the only package that imports PyQt6 and pyqtgraph. Views hold view state (zoom,
selection) and adapt analysis results; the analyses themselves live in
:mod:`explorer.analysis` and run in worker threads (see :mod:`explorer.ui.loader`).

Entry point: :func:`explorer.ui.app.main` (``explorer view TRACE``).
"""
