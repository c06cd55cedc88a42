"""conftest's `run_notebook`: a kernel that died before its first reply (a TCP port race between
two workers) is started again, at most twice; any other failure raises at once."""

from __future__ import annotations

import nbclient
import pytest
from conftest import KERNEL_DIED


class _Client:
    """A NotebookClient stand-in whose first `fails` runs raise `error`."""

    runs = 0
    fails = 0
    error: Exception = RuntimeError(KERNEL_DIED)

    def __init__(self, nb, **options) -> None:
        self.nb = nb

    def execute(self):
        type(self).runs += 1
        if type(self).runs <= type(self).fails:
            raise type(self).error
        return self.nb


@pytest.fixture
def client(monkeypatch) -> type[_Client]:
    monkeypatch.setattr(nbclient, "NotebookClient", _Client)
    _Client.runs, _Client.fails, _Client.error = 0, 0, RuntimeError(KERNEL_DIED)
    return _Client


def test_a_kernel_that_died_at_start_is_started_again(run_notebook, client) -> None:
    client.fails = 2
    assert run_notebook("nb") == "nb" and client.runs == 3


def test_three_deaths_at_start_raise(run_notebook, client) -> None:
    client.fails = 3
    with pytest.raises(RuntimeError, match=KERNEL_DIED):
        run_notebook("nb")
    assert client.runs == 3


def test_any_other_failure_raises_at_once(run_notebook, client) -> None:
    client.fails, client.error = 1, RuntimeError("a cell failed")
    with pytest.raises(RuntimeError, match="a cell failed"):
        run_notebook("nb")
    assert client.runs == 1
