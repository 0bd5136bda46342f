"""The OpenAPI 3 document, derived from the routes: each endpoint carries its own operation
(:func:`operation` attaches it), and :func:`document` walks a route table to assemble them.

Invariants:
- a route whose endpoint carries no operation is refused when the document is built, which
  :func:`~snapshotd.api.create_api` does at start: no route exists without its description;
- a route documents every method it serves but ``HEAD``, under its path without converters
  (``{path:path}`` is ``{path}``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from snapshotd.api.inputs import MAX_BODY

__all__ = [
    "AUTH_ERRORS",
    "NOT_FOUND",
    "PATH",
    "SITE",
    "WRITE_ERRORS",
    "document",
    "operation",
    "param",
]

E = TypeVar("E")

_ATTRIBUTE = "openapi_operation"
_CONVERTER = re.compile(r":\w+}")


def param(
    name: str, where: str, description: str, schema: dict[str, Any], required: bool = False
) -> dict[str, Any]:
    """One parameter object; a path parameter is always required."""
    return {
        "name": name,
        "in": where,
        "description": description,
        "required": required or where == "path",
        "schema": schema,
    }


def operation(
    summary: str,
    *,
    params: Sequence[dict[str, Any]] = (),
    body: dict[str, Any] | None = None,
    responses: dict[str, str],
    content: str = "application/json",
    security: list[dict[str, list[str]]] | None = None,
) -> Callable[[E], E]:
    """Attach an operation to an endpoint: its summary, parameters, request body, responses
    (a success names ``content`` as its media type) and, when not the document's, security."""
    op: dict[str, Any] = {
        "summary": summary,
        "parameters": list(params),
        "responses": {
            code: {
                "description": text,
                **({"content": {content: {}}} if code.startswith("2") else {}),
            }
            for code, text in responses.items()
        },
    }
    if body is not None:
        op["requestBody"] = body
    if security is not None:
        op["security"] = security

    def attach(endpoint: E) -> E:
        setattr(endpoint, _ATTRIBUTE, op)
        return endpoint

    return attach


SITE = param("site", "path", "a site's name", {"type": "string"})
PATH = param(
    "path",
    "path",
    "the site path without its leading '/', its query percent-encoded into it "
    "(item/7, search%3Fq%3Dshoes); empty for '/'",
    {"type": "string"},
)
AUTH_ERRORS = {"401": "no token, or a wrong one"}
NOT_FOUND = {"404": "no such site, path or snapshot"}
# What a write to a site can be refused for, past its own 400.
WRITE_ERRORS = {"413": f"body over {MAX_BODY // 2**20} MiB", **AUTH_ERRORS, **NOT_FOUND}

_RECORD = {
    "type": "object",
    "properties": {
        k: {"type": t}
        for k, t in {
            "site": "string",
            "path": "string",
            "ref": "string",
            "state": "string",
            "priority": "integer",
            "status": "integer",
            "hops": "integer",
            "attempts": "integer",
            "created_at": "string",
            "queued_at": "string",
            "captured_at": "string",
            "expires_at": "string",
            "error": "string",
            "duplicate_of": "string",
            "readiness_limit": "boolean",
        }.items()
    }
    | {"profiles": {"type": "array", "items": {"type": "string"}}},
}


def document(routes: Sequence[BaseRoute]) -> dict[str, Any]:
    """The OpenAPI 3 description of ``routes``; ValueError names a route with no operation."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        op = getattr(getattr(route, "endpoint", None), _ATTRIBUTE, None)
        if not isinstance(route, Route) or op is None:
            raise ValueError(
                f"route {getattr(route, 'path', route)!r} has no OpenAPI operation: "
                "describe its endpoint with @operation"
            )
        ops = paths.setdefault(_CONVERTER.sub("}", route.path), {})
        for method in sorted((route.methods or {"GET"}) - {"HEAD"}):
            ops[method.lower()] = op
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "snapshotd API",
            "version": "1",
            "description": "Drive snapshotd: queue, inspect and delete paths and snapshots. "
            "Send 'Authorization: Bearer <token>' (one of server.api_tokens, or with none "
            "configured the one in the console URL logged at start); the render endpoint "
            "also takes one of server.render_tokens, which opens nothing else. Errors are "
            '{"error": message, "field": name}.',
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "prerenderToken": {"type": "apiKey", "in": "header", "name": "X-Prerender-Token"},
            },
            "schemas": {"Path": _RECORD},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


@operation("this document", responses={"200": "OpenAPI 3", **AUTH_ERRORS})
async def openapi_json(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)
