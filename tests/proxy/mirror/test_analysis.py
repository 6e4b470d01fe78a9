"""The analysis worker's hand-off: every exchange submitted is analysed once, however the event
loop's submissions and the worker's wake-ups interleave, and a full queue drops and counts."""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry

from analyzers import Answer, Finding
from proxy.config import parse_config
from proxy.mirror import CompiledRules
from proxy.mirror.analysis import AnalysisWorker
from proxy.observability.metrics import GatewayMetrics
from tests.proxy.store.test_exchanges import make_record

CONFIG = """
models: {m: {provider: openai, base_url: "http://127.0.0.1:9/v1", model: m}}
routes: {r: {primary: m}}
"""


class Seen:
    """An analyzer plugin that notes every exchange it is given (on the worker's thread)."""

    name = "seen"

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.answers: list[str] = []
        self.entered = threading.Event()
        self.hold = hold

    def analyze_exchange(self, exchange: Any) -> list[Finding]:
        self.entered.set()
        if self.hold is not None:
            self.hold.wait(30)
        self.answers.append(exchange.answer.text)
        return []

    def analyze_pair(self, pair: Any) -> list[Finding]:
        return []


def worker(plugin: Seen, queue_size: int = 10_000) -> tuple[AnalysisWorker, CollectorRegistry]:
    registry = CollectorRegistry()
    made = AnalysisWorker(
        CompiledRules(parse_config(CONFIG, {})), [plugin], GatewayMetrics(registry),
        lambda record: None, queue_size=queue_size,
    )  # fmt: skip
    return made, registry


def test_every_exchange_is_analysed_once_whatever_the_interleaving() -> None:
    # Submitted from two threads as fast as they go, while the worker drains and sleeps in
    # between: a lost wake-up would leave items behind when stop() ends the worker.
    plugin = Seen()
    analysis, registry = worker(plugin)
    analysis.start()

    def submit(prefix: str) -> None:
        for n in range(3_000):
            analysis.submit(make_record(), Answer(f"{prefix}-{n}"))

    threads = [threading.Thread(target=submit, args=(p,)) for p in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    analysis.stop(30)
    assert not analysis._thread.is_alive()
    assert sorted(plugin.answers) == sorted(f"{p}-{n}" for p in "ab" for n in range(3_000))
    assert analysis.analysed == 6_000
    assert not registry.get_sample_value("mirrorgate_analysis_dropped_total")


def test_a_full_queue_drops_and_counts_and_never_blocks() -> None:
    hold = threading.Event()
    plugin = Seen(hold)
    analysis, registry = worker(plugin, queue_size=3)
    analysis.start()
    analysis.submit(make_record(), Answer("busy"))
    assert plugin.entered.wait(30)  # the worker holds it: three more fit in the queue
    for n in range(5):
        analysis.submit(make_record(), Answer(f"q-{n}"))
    assert registry.get_sample_value("mirrorgate_analysis_dropped_total") == 2
    hold.set()
    analysis.stop(30)
    assert plugin.answers == ["busy", "q-0", "q-1", "q-2"]
