"""Skills through the native API: the registry of `/api/v1/settings/skills`, what agents can
name (`/api/v1/skills`), and the shipped catalog."""

from __future__ import annotations

import pytest

import wire


def manifest(name: str, **overrides) -> dict:
    return {"type": "git", "name": name, "description": "Reads PDF invoices.",
            "url": "https://github.com/acme/skills", "ref": "main", "path": "skills/pdf", **overrides}


def test_skills_are_created_listed_and_replaced(api):
    name = wire.unique("pdf").lower()
    created = api.ok(api.post("/api/v1/settings/skills", json={"manifest": manifest(name)}), 201)["data"]
    assert created == {"name": name, "manifest": manifest(name)}
    wire.assert_error(api.post("/api/v1/settings/skills", json={"manifest": manifest(name)}), 409)

    replaced = manifest(name, description="Reads PDF invoices and receipts.", ref="v2")
    assert api.ok(api.put("/api/v1/settings/skills", json={"manifest": replaced}))["data"]["manifest"] == replaced
    listed = api.ok(api.get("/api/v1/settings/skills"))["data"]
    assert {"name": name, "manifest": replaced} in listed
    available = api.ok(api.get("/api/v1/skills"))["data"]
    assert {"name": name, "description": "Reads PDF invoices and receipts."} in available
    assert api.ok(api.get("/api/v1/catalogs/skills")) == {"data": []}


@pytest.mark.parametrize("field, value", [
    ("name", "Bad Name"),
    ("description", " "),
    ("url", "file:///etc"),
    ("url", "https://user:secret@github.com/a/b"),
    ("ref", "--upload-pack=touch /tmp/x"),
    ("path", "../outside"),
    ("type", "zip"),
])
def test_bad_manifests_are_400_naming_the_field(api, field, value):
    body = {"manifest": {**manifest(wire.unique("bad").lower()), field: value}}
    error = wire.assert_error(api.post("/api/v1/settings/skills", json=body), 400)
    assert field in (error.get("param") or "") + error["message"], error
    assert "secret" not in error["message"]
