"""An aiohttp app served on a free loopback port, for tests that stand up a small HTTP peer
(an inference front, vLLM's listing, a policy endpoint)."""

from __future__ import annotations

from aiohttp import web


async def serve_app(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve `app` on 127.0.0.1 (port 0); the runner (to `cleanup()`) and the base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"
