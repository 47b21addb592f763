"""The priority mailbox on its own."""

from __future__ import annotations

import threading

from barnraise.sim.mailbox import PriorityMailbox


def drain(box: PriorityMailbox) -> list[object]:
    out = []
    while not box.empty():
        out.append(box.get())
    return out


def test_letters_leave_by_priority_then_arrival() -> None:
    box = PriorityMailbox(10)
    for payload, priority in [("low-1", 1), ("normal-1", 5), ("critical", 10), ("normal-2", 5),
                              ("high", 8), ("low-2", 1)]:
        assert box.offer(payload, priority)
    assert drain(box) == ["critical", "high", "normal-1", "normal-2", "low-1", "low-2"]


def test_a_full_mailbox_refuses_without_blocking_and_keeps_what_it_had() -> None:
    box = PriorityMailbox(2)
    assert box.offer("a", 5) and box.offer("b", 5)
    assert not box.offer("c", 10)
    assert len(box) == 2
    assert box.offer("timer", 5, bounded=False)
    assert drain(box) == ["a", "b", "timer"]


def test_control_messages_queue_behind_every_letter() -> None:
    box = PriorityMailbox(5)
    box.offer("mail", 1)
    box.put("stop")
    box.offer("later mail", 1)
    assert drain(box) == ["mail", "later mail", "stop"]


def test_get_blocks_until_a_letter_arrives() -> None:
    box = PriorityMailbox(5)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(box.get()))
    reader.start()
    box.offer("hello", 5)
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert got == ["hello"]


def test_many_senders_lose_nothing() -> None:
    box = PriorityMailbox(100_000)
    def send(tag: int) -> None:
        for i in range(2000):
            box.offer((tag, i), 1 + (i % 10))
    threads = [threading.Thread(target=send, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    got = drain(box)
    assert len(got) == 8000
    assert sorted(got) == sorted((t, i) for t in range(4) for i in range(2000))
