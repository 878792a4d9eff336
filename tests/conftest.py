import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def mirror():
    """The local data mirror (VLBIAS_MIRROR, else ../shared/data beside the repository)."""
    path = Path(os.environ.get("VLBIAS_MIRROR", REPO.parent / "shared" / "data"))
    if not (path / "ieat").is_dir():
        pytest.skip(f"needs the local data mirror of the upstream repositories; {path} is absent "
                    "(set VLBIAS_MIRROR to a copy laid out like shared/data)")
    return path


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    # tests never reach a model hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
