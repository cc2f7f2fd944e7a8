"""The scheduler of ``mars serve`` alone (mars/serve/schedule.py): a bounded queue served
round-robin by client, a place freed by a request that leaves it."""

from __future__ import annotations

import asyncio

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("starlette")

from mars.serve.schedule import QueueFull, Scheduler  # noqa: E402

# ---------------------------------------------------------------------------------------------
# The scheduler alone


def test_the_queue_is_bounded_and_served_round_robin_by_client():
    async def go():
        s = Scheduler(max_active=1, max_queue=3)
        order: list[str] = []
        gate = asyncio.Event()

        async def job(client: str, name: str):
            async with s.slot(client):
                order.append(name)
                await gate.wait()

        first = asyncio.create_task(job("a", "a1"))
        await asyncio.sleep(0)
        waiting = [
            asyncio.create_task(job(c, n)) for c, n in (("a", "a2"), ("a", "a3"), ("b", "b1"))
        ]
        await asyncio.sleep(0)
        assert s.active == 1 and s.queued == 3
        with pytest.raises(QueueFull) as full:
            async with s.slot("c"):
                pass
        assert full.value.retry_after >= 1
        gate.set()
        await asyncio.gather(first, *waiting)
        return order, s

    order, s = asyncio.run(go())
    assert order == ["a1", "a2", "b1", "a3"]  # a and b take turns
    assert s.active == 0 and s.queued == 0


def test_a_request_that_leaves_the_queue_frees_its_place():
    async def go():
        s = Scheduler(max_active=1, max_queue=1)
        hold = asyncio.Event()

        async def holder():
            async with s.slot("a"):
                await hold.wait()

        h = asyncio.create_task(holder())
        await asyncio.sleep(0)

        async def waiter():
            async with s.slot("b"):
                pass

        w = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        assert s.queued == 1
        w.cancel()
        await asyncio.gather(w, return_exceptions=True)
        assert s.queued == 0
        hold.set()
        await h
        return s

    s = asyncio.run(go())
    assert s.active == 0
