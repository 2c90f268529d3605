"""Fixtures of the job report's tests; the helpers that run real jobs are in ``job_runs``."""

from __future__ import annotations

from pathlib import Path

import pytest
from job_runs import SAMPLE_JOB


@pytest.fixture(scope="session")
def sample_job() -> Path:
    return SAMPLE_JOB
