"""The kafka-python clients a run keeps: one made before a question (connected while the run
sent, or for a watch's last batch) may know a broker that has died since; failing, it is
replaced and the question asked once more. A client made for the question is not."""

from __future__ import annotations

import pytest

from kappa_ingest.pipeline import kept as kept_module
from kappa_ingest.pipeline.kept import Kept


class Client:
    def __init__(self, n: int) -> None:
        self.n, self.closed = n, False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def made(monkeypatch):
    clients: list[Client] = []

    def python_admin(conf, timeout_s, bootstrap_timeout_s=None):
        clients.append(Client(len(clients)))
        return clients[-1]

    monkeypatch.setattr(kept_module, "python_admin", python_admin)
    return clients


def _dead_broker_then_answer(client: Client) -> str:
    if client.n == 0:
        raise ConnectionRefusedError("111 ECONNREFUSED")  # the broker it knew died since
    return f"answered by {client.n}"


def test_a_client_made_before_its_question_that_fails_it_is_replaced_and_asked_again(made):
    k = Kept("h:1")
    k.connect("transactions", {"bootstrap_servers": "h:1"}, 5.0)  # while the run sends
    assert k.ask("transactions", {"bootstrap_servers": "h:1"}, 5.0, _dead_broker_then_answer) == "answered by 1"
    assert made[0].closed and not made[1].closed


def test_a_client_made_for_its_question_fails_with_it(made):
    k = Kept("h:1")
    with pytest.raises(ConnectionRefusedError):
        k.ask("transactions", {"bootstrap_servers": "h:1"}, 5.0, _dead_broker_then_answer)
    assert len(made) == 1 and made[0].closed
