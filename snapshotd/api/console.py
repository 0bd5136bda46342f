"""The web console's static files: a page, a script and a style sheet shipped in the package.

Invariants:
- the files hold no data and pass no token check (the page asks the user for a token and
  sends it to the API itself);
- they are read once, when the API is built, and kept on the application's state;
- each is served with a Content-Security-Policy that lets the page reach only this server.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

from snapshotd.api.openapi import operation, param
from snapshotd.api.shared import ApiError

CONSOLE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
CONSOLE_CSP = (
    "default-src 'self'; script-src 'self'; connect-src 'self'; object-src 'none'; "
    "style-src 'self' 'unsafe-inline' http: https:; img-src 'self' data: http: https:; "
    "font-src 'self' data: http: https:; frame-src 'self' about:; form-action 'self'; "
    "frame-ancestors 'none'"
)


def read_console_files() -> dict[str, bytes]:
    """Every console file's bytes, by name."""
    return {
        name: resources.files("snapshotd").joinpath("console", name).read_bytes()
        for name in CONSOLE_FILES
    }


def _console(request: Request, name: str) -> Response:
    files: dict[str, bytes] = request.app.state.console_files
    if name not in files:
        raise ApiError(404, "no such console file")
    return Response(
        files[name],
        media_type=CONSOLE_FILES[name],
        headers={
            "Content-Security-Policy": CONSOLE_CSP,
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-cache",
        },
    )


@operation(
    "the web console (holds no data; asks for a token)",
    responses={"200": "HTML"},
    content="text/html",
    security=[],
)
async def console_page(request: Request) -> Response:
    return _console(request, "index.html")


@operation(
    "the console's script and style sheet",
    params=[
        param(
            "file",
            "path",
            "a console file",
            {"type": "string", "enum": ["console.js", "console.css"]},
        )
    ],
    responses={"200": "JavaScript or CSS", "404": "no such file"},
    content="text/plain",
    security=[],
)
async def console_file(request: Request) -> Response:
    return _console(request, request.path_params["file"])
