"""The progress bar: in place on a terminal, a line per 5 % elsewhere."""

from __future__ import annotations

import io

from proxy.replay.progress import ProgressBar


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_a_line_every_five_percent_with_rate_and_eta() -> None:
    out, clock = io.StringIO(), Clock()
    bar = ProgressBar(200, out, tty=False, clock=clock)
    for _ in range(200):
        clock.now += 0.5  # two per second
        bar.advance()
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 20
    assert lines[0] == "replay: 10/200 (5%) 2.0/s ETA 1:35"
    assert lines[9] == "replay: 100/200 (50%) 2.0/s ETA 0:50"
    assert lines[-1] == "replay: 200/200 (100%) 2.0/s ETA 0:00"


def test_small_totals_print_each_step_once() -> None:
    out = io.StringIO()
    bar = ProgressBar(3, out, tty=False, clock=Clock())
    for _ in range(3):
        bar.advance()
    assert [line.split()[1] for line in out.getvalue().splitlines()] == ["1/3", "2/3", "3/3"]


def test_on_a_terminal_one_line_redrawn_at_most_ten_times_a_second() -> None:
    out, clock = io.StringIO(), Clock()
    bar = ProgressBar(1000, out, tty=True, clock=clock, label="eval")
    for _ in range(1000):
        clock.now += 0.01
        bar.advance()
    bar.close()
    text = out.getvalue()
    assert "\n" not in text[:-1]
    draws = text.count("\r")
    assert 90 <= draws <= 103  # ~10 s of work: a redraw per 0.1 s, plus the last and close
    assert text.endswith("\r" + "eval [" + "#" * 30 + "] 1000/1000 (100%) 100.0/s ETA 0:00\x1b[K\n")


def test_eta_is_unknown_before_anything_is_done() -> None:
    out = io.StringIO()
    bar = ProgressBar(10, out, tty=True, clock=Clock())
    bar.close()
    assert "0/10 (0%) 0.0/s ETA --:--" in out.getvalue()
