"""Calling a gated function the three ways the package supports: a plain
function on a Client, an `async def` on a Client, an `async def` on an
AsyncClient. Each call builds its own client (an AsyncClient's channel
belongs to one event loop) and records whether the function ran."""

import asyncio
from typing import Any, Dict, List

import countersign

FLAVORS = ["def", "async-def", "asyncio"]


class Gated:
    """A gated "restart" whose runs are recorded in `ran`."""

    def __init__(self, flavor: str, endpoint: str, api_key: str, public_key: str, **client_options: Any) -> None:
        self.flavor = flavor
        self.endpoint = endpoint
        self.api_key = api_key
        self.client_options = dict(client_options, public_key=public_key)
        self.ran: List[tuple] = []

    def call(self, gate: Dict[str, Any], *args: Any) -> Any:
        """Calls a function gated with `gate` on `args`; returns what it
        returned (its arguments and the approval it ran under)."""

        def restart(*a: Any) -> Any:
            self.ran.append(a)
            return a, countersign.current_approval()

        async def restart_async(*a: Any) -> Any:
            await asyncio.sleep(0)
            self.ran.append(a)
            return a, countersign.current_approval()

        if self.flavor == "def":
            with countersign.Client(self.endpoint, self.api_key, **self.client_options) as client:
                return client.gate(**gate)(restart)(*args)
        if self.flavor == "async-def":
            with countersign.Client(self.endpoint, self.api_key, **self.client_options) as client:
                return asyncio.run(client.gate(**gate)(restart_async)(*args))

        async def on_async_client() -> Any:
            async with countersign.AsyncClient(self.endpoint, self.api_key, **self.client_options) as client:
                return await client.gate(**gate)(restart_async)(*args)

        return asyncio.run(on_async_client())
