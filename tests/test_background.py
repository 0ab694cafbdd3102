"""``app.background.Background``: tasks held until they end, cancelled at shutdown."""

from __future__ import annotations

import asyncio

from app.background import Background


def test_tasks_are_held_until_they_end_and_close_cancels_the_rest() -> None:
    async def run() -> None:
        background: Background[str] = Background()
        gate = asyncio.Event()

        async def ends() -> str:
            return "done"

        async def waits() -> str:
            await gate.wait()
            return "never"

        quick = background.start(ends(), name="quick")
        slow = background.start(waits())
        assert len(background) == 2 and quick.get_name() == "quick"
        assert await quick == "done"
        await asyncio.sleep(0)  # its done-callback lets it go
        assert len(background) == 1
        await background.close()
        assert slow.cancelled() and len(background) == 0

    asyncio.run(run())
