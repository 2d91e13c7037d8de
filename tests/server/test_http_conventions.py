"""HTTP conventions: offline docs, working OpenAPI examples, RFC 9457 problem details,
201 Created for a new catalog, every emit form of ``/v1/lower``, API (not CLI) wording."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from planner.lower.backends import emit_forms
from planner.server.models import EXAMPLE_BINDINGS, EXAMPLE_KERNEL, EmitForm

URL = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\s*:\s*["']([^"']+)["']""")
ABSOLUTE = re.compile(r"https?://[^\s\"'<>)]+")


def _assets(client: httpx.Client, path: str) -> list[str]:
    r = client.get(path)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    html = r.text
    foreign = [u for u in ABSOLUTE.findall(html)
               if urlsplit(u).netloc != urlsplit(str(client.base_url)).netloc]
    assert foreign == [], f"{path} references other hosts: {foreign}"
    found = [a or b for a, b in URL.findall(html)]
    assert found, f"{path} references no local asset"
    return [urljoin(str(client.base_url) + path, u) for u in found]


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_docs_pages_are_served_locally(client: httpx.Client, path: str) -> None:
    for url in _assets(client, path):
        r = client.get(url)
        assert r.status_code == 200, (url, r.status_code)


def test_swagger_ui_and_redoc_come_from_the_package(client: httpx.Client) -> None:
    html = client.get("/docs").text
    assert "/docs/static/swagger-ui-bundle.js" in html and "/docs/static/swagger-ui.css" in html
    js = client.get("/docs/static/swagger-ui-bundle.js")
    assert js.status_code == 200 and len(js.content) > 100_000
    # Swagger UI 5 renders OpenAPI 3.1 (FastAPI's version); Swagger UI 4 cannot
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    assert b'"5.' in js.content[:2_000_000]
    assert "/docs/static/redoc.standalone.js" in client.get("/redoc").text
    redoc = client.get("/docs/static/redoc.standalone.js")
    assert redoc.status_code == 200 and len(redoc.content) > 100_000


def _request_examples(openapi: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path, operations in openapi["paths"].items():
        for method, op in operations.items():
            content = (op.get("requestBody") or {}).get("content", {})
            media = content.get("application/json")
            if method != "post" or not media or "$ref" not in media.get("schema", {}):
                continue
            name = media["schema"]["$ref"].rsplit("/", 1)[-1]
            examples = [e["value"] for e in media.get("examples", {}).values()]
            examples += openapi["components"]["schemas"][name].get("examples", [])
            assert examples, f"POST {path} has no request example"
            out += [(path, e) for e in examples]
    return out


def test_every_openapi_request_example_succeeds(client: httpx.Client) -> None:
    openapi = client.get("/openapi.json").json()
    examples = _request_examples(openapi)
    assert {p for p, _ in examples} >= {"/v1/plan", "/v1/check", "/v1/lower", "/v1/compare"}
    for path, body in examples:
        r = client.post(path, json=body)
        if path == "/v1/sweeps":  # a job over a built-in example's space: 202, then cancel
            assert r.status_code == 202, r.text
            assert client.delete(r.headers["location"]).status_code in (200, 202, 204)
            continue
        assert body["kernel"] == EXAMPLE_KERNEL and body["bindings"] == EXAMPLE_BINDINGS
        assert r.status_code == 200, (path, r.text)


def _problem(r: httpx.Response, status: int, kind: str, path: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert body["type"] == f"https://planner.invalid/problems/{kind}"
    assert body["title"] and body["detail"] and body["status"] == status
    assert body["instance"] == path and body["kind"] == kind
    assert body["request_id"] == r.headers["x-request-id"]
    assert "error" not in body
    return body


def test_errors_are_rfc9457_problems(client: httpx.Client) -> None:
    _problem(client.get("/v1/catalogs/no-such-target"), 404, "unknown-target",
             "/v1/catalogs/no-such-target")
    body = _problem(client.post("/v1/plan", json={"kernel": "not ir"}), 422, "parse",
                    "/v1/plan")
    assert body["diagnostics"] and body["location"]["file"] == "<request>"
    _problem(client.post("/v1/plan", content=b"{", headers={"content-type":
                                                             "application/json"}),
             400, "bad-json", "/v1/plan")
    _problem(client.get("/nowhere"), 404, "not-found", "/nowhere")


def test_openapi_documents_problem_json(client: httpx.Client) -> None:
    openapi = client.get("/openapi.json").json()
    responses = openapi["paths"]["/v1/plan"]["post"]["responses"]
    assert list(responses["422"]["content"]) == ["application/problem+json"]
    props = openapi["components"]["schemas"]["ErrorResponse"]["properties"]
    assert {"type", "title", "status", "detail", "instance", "kind"} <= set(props)


def test_creating_a_catalog_is_201_with_location(client: httpx.Client, auth: dict[str, str],
                                                 catalog_text: Any) -> None:
    name = "conventions-created"
    r = client.put(f"/v1/catalogs/{name}", content=catalog_text(name),
                   headers={**auth, "If-None-Match": "*", "content-type": "application/yaml"})
    assert r.status_code == 201, r.text
    assert r.headers["location"] == f"/v1/catalogs/{name}"
    assert client.get(r.headers["location"]).status_code == 200
    again = client.put(f"/v1/catalogs/{name}", content=catalog_text(name),
                       headers={**auth, "If-Match": r.headers["etag"],
                                "content-type": "application/yaml"})
    assert again.status_code == 200 and "location" not in again.headers
    gone = client.delete(f"/v1/catalogs/{name}",
                         headers={**auth, "If-Match": again.headers["etag"]})
    assert gone.status_code == 200, gone.text


def test_the_emit_choices_are_the_backends_forms() -> None:
    assert set(EmitForm.__args__) == set(emit_forms())  # type: ignore[attr-defined]


@pytest.mark.parametrize(("target", "emit", "marker"), [
    ("x86-avx2", "loops", "loop program softmax"), ("x86-avx2", "llvm", "define"),
    ("x86-avx2", "asm", "ret"),
    ("apple-m2", "msl", "kernel void softmax("), ("apple-m2", "loops", "loop program softmax"),
    ("apple-m2", None, "kernel void softmax("), ("x86-avx2", None, "loop program softmax")])
def test_lower_emits_every_form_of_the_backend(client: httpx.Client, target: str,
                                               emit: str | None, marker: str) -> None:
    body: dict[str, Any] = {"kernel": EXAMPLE_KERNEL, "bindings": EXAMPLE_BINDINGS,
                            "target": target}
    if emit is not None:
        body["emit"] = emit
    r = client.post("/v1/lower", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["emit"] == (emit or ("msl" if target == "apple-m2" else "loops"))
    assert marker in r.json()["code"]


@pytest.mark.parametrize(("target", "emit", "allowed"), [
    ("apple-m2", "llvm", "loops, msl"), ("apple-m2", "asm", "loops, msl"),
    ("x86-avx2", "msl", "loops, llvm, asm")])
def test_lower_names_the_allowed_forms(client: httpx.Client, target: str, emit: str,
                                       allowed: str) -> None:
    r = client.post("/v1/lower", json={"kernel": EXAMPLE_KERNEL, "bindings": EXAMPLE_BINDINGS,
                                       "target": target, "emit": emit})
    body = _problem(r, 400, "unsupported", "/v1/lower")
    assert body["detail"].endswith(f"which emits {allowed}"), body["detail"]
    unknown = client.post("/v1/lower", json={"kernel": EXAMPLE_KERNEL, "emit": "ptx"})
    assert unknown.status_code == 422 and "'msl'" in unknown.json()["detail"]


def test_errors_advise_request_members_not_cli_flags(client: httpx.Client) -> None:
    r = client.post("/v1/plan", json={"kernel": EXAMPLE_KERNEL})
    assert r.status_code == 422, r.text
    text = r.text
    assert "--bind" not in text and "--bound" not in text, text
    assert '\\"bindings\\": {\\"' in text, text
