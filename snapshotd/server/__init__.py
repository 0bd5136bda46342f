"""Running ``serve``: the ASGI application, the HTTP protocol and its limits, the worker
processes."""
