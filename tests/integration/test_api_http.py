"""HTTP behaviour common to every endpoint: offline docs, JSON errors (unknown routes, wrong
methods, storage down, unexpected exceptions), CORS only when asked, and `/`."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import ApiSettings
from tests.studykit import make_repo
from tuner.db.repository import Repository
from tuner.db.rows import StudyRow
from tuner.errors import StorageError

EXTERNAL = re.compile(r"https?://", re.IGNORECASE)


@pytest.fixture()
def repo(tmp_path: Path) -> Repository:
    return make_repo(f"sqlite:///{tmp_path / 'h.db'}")


@pytest.fixture()
def client(repo: Repository) -> TestClient:
    return TestClient(create_app(ApiSettings(storage=repo)))


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_reference_no_external_url_and_their_assets_are_served(
    client: TestClient, page: str
) -> None:
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not EXTERNAL.search(r.text), EXTERNAL.findall(r.text)
    assets = re.findall(r'(?:src|href)="(/[^"]+)"', r.text)
    assert any(a.endswith(".js") for a in assets)
    for asset in assets:
        assert client.get(asset).status_code == 200, asset
    assert "/openapi.json" in r.text


def test_openapi_describes_the_endpoints(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/recommendations", "/v1/studies", "/v1/studies/{name}/trials", "/healthz"):
        assert path in paths
    assert "post" in paths["/v1/studies"] and "security" in paths["/v1/studies"]["post"]


def test_a_load_balancer_s_head_probe_is_answered(client: TestClient) -> None:
    head = client.head("/healthz")  # it was a 405: HEAD-probing balancers took the service down
    assert head.status_code == 200 and head.content == b""
    assert client.get("/healthz").json()["status"] == "ok"


def test_unknown_routes_wrong_methods_and_bad_params_answer_json(client: TestClient) -> None:
    r = client.get("/v2/nothing")
    assert r.status_code == 404 and r.json()["message"] == "no such endpoint: GET /v2/nothing"
    r = client.delete("/v1/studies")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
    assert r.headers["allow"] == "GET, POST" and "GET, POST" in r.json()["message"]
    r = client.get("/v1/recommendations?model=x")
    assert r.status_code == 422
    assert "query parameter gpu" in r.json()["message"]
    assert {p["where"] for p in r.json()["problems"]} >= {"query parameter workload"}
    r = client.get("/v1/compare/abc")
    assert r.status_code == 422 and "comparison_id" in r.json()["message"]


class _BrokenRepo(Repository):
    """A repository whose study reads fail the way a test asks."""

    def __init__(self, inner: Repository, error: Exception) -> None:
        super().__init__(inner._engine)
        self.error = error

    def list_studies(self) -> list[StudyRow]:
        raise self.error

    def change_marker(self) -> tuple[int, int | None, float | None, float | None]:
        raise self.error


def test_storage_down_is_503_and_a_bug_is_a_500_without_a_traceback(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    down = _BrokenRepo(repo, StorageError("database error: gone", hint="check the database"))
    r = TestClient(create_app(ApiSettings(storage=down))).get("/healthz")
    assert r.status_code == 503
    assert r.json() == {
        "error": "storage_unavailable",
        "message": "database error: gone",
        "hint": "check the database",
    }
    bug = _BrokenRepo(repo, RuntimeError("secret internals"))
    client = TestClient(create_app(ApiSettings(storage=bug)), raise_server_exceptions=False)
    r = client.get("/v1/studies")
    assert r.status_code == 500 and r.json()["error"] == "internal"
    assert "secret" not in r.text and "Traceback" not in r.text
    assert "secret internals" in caplog.text  # but the server log has it


def test_cors_headers_only_for_configured_origins(repo: Repository) -> None:
    preflight = {"Origin": "http://dash.example", "Access-Control-Request-Method": "GET"}
    plain = TestClient(create_app(ApiSettings(storage=repo)))
    assert "access-control-allow-origin" not in plain.get("/healthz", headers=preflight).headers
    cors = TestClient(create_app(ApiSettings(storage=repo, cors_origins=("http://dash.example",))))
    r = cors.options("/v1/studies", headers=preflight)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "http://dash.example"
    other = cors.get("/healthz", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in other.headers
    # every write the API has: withdrawing a queued study was refused its preflight
    for method in ("POST", "DELETE"):
        asked = {**preflight, "Access-Control-Request-Method": method}
        assert cors.options("/v1/studies/s", headers=asked).status_code == 200, method


def test_root_redirects_to_the_dashboards_or_the_docs(client: TestClient) -> None:
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] in ("/ui/", "/docs")
    assert client.get(r.headers["location"]).status_code == 200


def test_every_answer_says_nosniff_and_the_docs_carry_a_policy(client: TestClient) -> None:
    for path in ("/v1/studies", "/healthz", "/openapi.json", "/v2/nothing", "/docs", "/ui/"):
        r = client.get(path)
        assert r.headers["x-content-type-options"] == "nosniff", path
        assert r.headers.get_list("x-content-type-options") == ["nosniff"], path
    for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        policy = client.get(page).headers["content-security-policy"]
        assert "default-src 'self'" in policy and "object-src 'none'" in policy
        assert "unsafe-eval" not in policy and "script-src 'self'" in policy
    # Swagger UI's one inline script is allowed by its hash, and nothing else inline is.
    page = client.get("/docs")
    inline = re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()
    assert len(inline) == 1
    assert f"script-src 'self' 'sha256-{digest}';" in page.headers["content-security-policy"]
    assert "'unsafe-inline'" not in page.headers["content-security-policy"].split("style-src")[0]


def test_a_cors_origin_is_taken_as_browsers_send_it_or_refused(repo: Repository) -> None:
    """--cors-origin http://localhost:3000/ never matched: browsers send the origin without a
    slash. One with a path, a query or no scheme can match nothing either: refused."""
    from tuner.errors import UsageError

    settings = ApiSettings.from_env(repo, cors_origins=["http://localhost:3000/", "HTTP://A.B"])
    assert settings.cors_origins == ("http://localhost:3000", "http://a.b")
    preflight = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "GET"}
    r = TestClient(create_app(settings)).options("/v1/studies", headers=preflight)
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
    for bad, why in (
        ("http://localhost:3000/ui", "has a path"),
        ("http://localhost:3000?x=1", "query"),
        ("localhost:3000", "has no scheme://host"),
    ):
        with pytest.raises(UsageError, match=why) as refused:
            ApiSettings.from_env(repo, cors_origins=[bad])
        assert repr(bad) in refused.value.message
        assert "--cors-origin http://localhost:3000" in (refused.value.hint or "")
    # A page opened from a file sends `Origin: null` (taken before); browsers leave out a
    # default port; a user name or an unclosed [IPv6 address is refused, not a traceback.
    kept = ApiSettings.from_env(repo, cors_origins=["null", "https://x.org:443", "http://[::1]:3"])
    assert kept.cors_origins == ("null", "https://x.org", "http://[::1]:3")
    for bad, why in (("http://user@localhost:3000", "user name"), ("http://[::1", "no URL")):
        with pytest.raises(UsageError, match=why):
            ApiSettings.from_env(repo, cors_origins=[bad])
