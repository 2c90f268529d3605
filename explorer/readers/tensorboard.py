"""TensorBoard profile log dirs: ``<logdir>/plugins/profile/<run>/`` holds a run's traces,
as ``torch.profiler.tensorboard_trace_handler`` writes them. The newest run is the one
read (its files are then a directory of traces: :mod:`explorer.readers.rank_dir`)."""

from __future__ import annotations

from pathlib import Path


def _profile_dir(directory: Path) -> Path:
    return directory / "plugins" / "profile"


def claims(path: Path) -> bool:
    """Is ``path`` a TensorBoard log dir (it has ``plugins/profile/``)?"""
    return path.is_dir() and _profile_dir(path).is_dir()


def newest_run(directory: Path) -> Path:
    """The directory whose traces ``directory`` stands for: a log dir's newest run, else
    ``directory`` itself."""
    profile = _profile_dir(directory)
    if profile.is_dir():
        runs = sorted((r for r in profile.iterdir() if r.is_dir()), key=lambda r: r.stat().st_mtime)
        if runs:
            return runs[-1]
    return directory
