#!/usr/bin/env python3
"""The official Python client (qdrant-client, installed by .ci/run) drives a whole
workflow against a real bin/quiver: collections (unnamed and named vectors, hnsw and
quantization settings), payload indexes, every kind of point write, reads, every
search form, hybrid queries (dense + sparse prefetches fused by RRF, a ColBERT-style
multivector MaxSim re-rank, each checked against a computation in this file), aliases,
snapshots (collection, shard, full-storage, upload) and deletion.

It runs the workflow one of two ways: over REST (the default), or with `--grpc` over the
public gRPC API (`prefer_grpc=True`: the client then sends everything its gRPC mode
covers through gRPC, and the rest, such as snapshot recovery and shard snapshots,
through REST, as a user's client does). scripts/run-tests.sh runs both.

It starts bin/quiver itself on a free port of 127.0.0.1 (and a second one for gRPC) with
its storage in a temporary folder (build first: `make build` or `npx tsc -p
tsconfig.json`), prints one TAP line per step (`ok N - name` / `not ok N - name`, with
the reason as `#` lines), then the plan `1..N` and `# pass N` / `# fail N`, and exits
non-zero when a step failed.

The client parses every answer into its pydantic models, so a response that lacks a
field or has the wrong shape fails the step that got it.

The client is built with its default options, as a user builds it: its version check
reads GET / (the Qdrant API version Quiver implements) and must not warn. Every warning
the client raises during the workflow is recorded, and a last step checks there was none.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import sys
import tarfile
import time
import traceback
import threading
import urllib.request
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PINNED = "qdrant-client==1.18.0"

sys.path.insert(0, os.path.join(REPO_ROOT, "test", "support"))
from quiver_server import Server as QuiverServer, exit_missing  # noqa: E402

try:
    from qdrant_client import QdrantClient, models
    from qdrant_client import grpc as pb
    from qdrant_client.conversions.conversion import GrpcToRest, RestToGrpc
    import qdrant_client
except ImportError as err:  # pragma: no cover - the message is the point
    exit_missing("qdrant_client", err, f".ci/run installs it (`{sys.executable} -m pip install {PINNED}`); run `bash .ci/run` or that pip command.")

PLAIN = "py_plain"
NAMED = "py_named"
HYBRID = "py_hybrid"
COLBERT = "py_colbert"
ALIAS = "py_alias"
UUID_A = "550e8400-e29b-41d4-a716-446655440000"
# Written in upper case on purpose: the server must hand it back lower-case hyphenated.
UUID_B = "F47AC10B-58CC-4372-A567-0E02B2C3D479"
UUID_B_NORM = UUID_B.lower()


# -- the server ---------------------------------------------------------------------------------

class Server(QuiverServer):
    """bin/quiver on a free port (and a free gRPC port with `grpc`) with a temporary storage folder; stopped with SIGTERM."""

    def __init__(self, grpc: bool) -> None:
        super().__init__(prefix="quiver-py-client-", grpc=grpc)


# -- a tiny TAP runner --------------------------------------------------------------------------

results: list[bool] = []


def step(name: str):
    def run(fn):
        n = len(results) + 1
        started = time.monotonic()
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - every failure is reported, then the next step runs
            results.append(False)
            print(f"not ok {n} - {name}")
            detail = describe(err)
            for line in detail.splitlines():
                print(f"#   {line}")
        else:
            results.append(True)
            print(f"ok {n} - {name} # {int((time.monotonic() - started) * 1000)} ms")
        sys.stdout.flush()
        return fn

    return run


def grpc_code(err: Exception) -> str | None:
    """The status code name of a failed gRPC call (grpc.RpcError), else None."""
    code = getattr(err, "code", None)
    if not callable(code):
        return None
    try:
        return code().name
    except Exception:  # noqa: BLE001 - not a gRPC error after all
        return None


def describe(err: Exception) -> str:
    """The client's UnexpectedResponse carries the status and body, a gRPC error its code and details: show them."""
    status = getattr(err, "status_code", None)
    content = getattr(err, "content", None)
    code = grpc_code(err)
    if code is not None:
        return f"{type(err).__name__}: gRPC {code} {err.details()[:1500]}"  # type: ignore[attr-defined]
    if status is not None:
        body = content.decode("utf-8", "replace") if isinstance(content, (bytes, bytearray)) else str(content)
        return f"{type(err).__name__}: HTTP {status} {body[:1500]}"
    tb = traceback.extract_tb(err.__traceback__)
    helpers = {"eq", "near", "raises_status", "describe"}
    where = next((f"line {f.lineno}: {f.line}" for f in reversed(tb) if f.filename == __file__ and f.name not in helpers), "")
    return f"{type(err).__name__}: {str(err)[:3000]}\n{where}"


def eq(actual, expected, what: str = "") -> None:
    if actual != expected:
        raise AssertionError(f"{what}: got {actual!r}, expected {expected!r}")


def near(actual, expected: float, what: str, eps: float = 1e-3) -> None:
    if not isinstance(actual, (int, float)) or abs(actual - expected) > eps:
        raise AssertionError(f"{what}: got {actual!r}, expected ≈ {expected}")


# The gRPC status the reference answers where its REST API answers each HTTP status.
GRPC_CODE_OF_HTTP = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 422: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 401: "UNAUTHENTICATED"}


def raises_status(status: int, fn, what: str) -> None:
    """`fn` fails with HTTP `status` over REST, or with the gRPC code the reference answers instead over gRPC."""
    try:
        fn()
    except Exception as err:  # noqa: BLE001
        code = grpc_code(err)
        if code is not None:
            if code != GRPC_CODE_OF_HTTP[status]:
                raise AssertionError(f"{what}: expected gRPC {GRPC_CODE_OF_HTTP[status]} (HTTP {status}), got {code} {err.details()}") from err  # type: ignore[attr-defined]
            return
        got = getattr(err, "status_code", None)
        if got != status:
            raise AssertionError(f"{what}: expected HTTP {status}, got {type(err).__name__} {got} {err}") from err
        return
    raise AssertionError(f"{what}: expected HTTP {status}, but the call succeeded")


def ids(points) -> list:
    return [p.id for p in points]


def by_id(points) -> dict:
    return {p.id: p for p in points}


def city(value: str) -> models.FieldCondition:
    return models.FieldCondition(key="city", match=models.MatchValue(value=value))


# -- hand computations for the hybrid steps ------------------------------------------------------

def dot(a, b) -> float:
    return sum(x * y for x, y in zip(a, b))


def sparse_dot(a: dict, b: dict) -> float:
    return sum(w * b[i] for i, w in a.items() if i in b)


def unit(v) -> list:
    n = math.sqrt(dot(v, v))
    return [x / n for x in v]


def max_sim_cosine(query, doc) -> float:
    """ColBERT's late interaction: for each query vector its best cosine over the document's vectors, summed."""
    return sum(max(dot(unit(q), unit(d)) for d in doc) for q in query)


def top(scores: dict, limit: int) -> list:
    """The ids of the `limit` best scores, best first (the data has no ties; checked)."""
    values = sorted(scores.values(), reverse=True)
    if len(set(values)) != len(values):
        raise AssertionError(f"test data has tied scores: {scores}")
    return sorted(scores, key=lambda i: -scores[i])[:limit]


def rrf_by_hand(lists: list, k: int) -> list:
    """Reciprocal rank fusion as the reference defines it: the point at position p (from 0)
    of a list gets 1 / (p + k) from it; sums per point, best first (no ties; checked)."""
    fused: dict = {}
    for lst in lists:
        for position, pid in enumerate(lst):
            fused[pid] = fused.get(pid, 0.0) + 1 / (position + k)
    order = top(fused, len(fused))
    return [(pid, fused[pid]) for pid in order]


# -- the workflow -------------------------------------------------------------------------------

def workflow(client: QdrantClient, url: str, grpc: bool) -> None:
    @step("info: the root answer parses as VersionInfo")
    def _():
        info = client.info()
        if not info.title or not info.version:
            raise AssertionError(f"empty title/version: {info!r}")

    @step("create_collection: unnamed vector with hnsw_config, named vectors with quantization")
    def _():
        eq(
            client.create_collection(
                PLAIN,
                vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT),
                hnsw_config=models.HnswConfigDiff(m=16, ef_construct=100, full_scan_threshold=10_000),
                optimizers_config=models.OptimizersConfigDiff(default_segment_number=2),
            ),
            True,
            "create plain",
        )
        eq(
            client.create_collection(
                NAMED,
                vectors_config={
                    "image": models.VectorParams(size=4, distance=models.Distance.COSINE),
                    "text": models.VectorParams(size=2, distance=models.Distance.EUCLID, hnsw_config=models.HnswConfigDiff(m=8)),
                },
                hnsw_config=models.HnswConfigDiff(m=12, ef_construct=64),
                quantization_config=models.ScalarQuantization(
                    scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, quantile=0.99, always_ram=True)
                ),
            ),
            True,
            "create named",
        )
        raises_status(
            409,
            lambda: client.create_collection(PLAIN, vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT)),
            "create an existing collection",
        )

    @step("get_collections and collection_exists")
    def _():
        eq(sorted(c.name for c in client.get_collections().collections), [NAMED, PLAIN], "names")
        eq(client.collection_exists(PLAIN), True, "exists plain")
        eq(client.collection_exists("py_nope"), False, "exists nope")

    @step("get_collection reports the configuration it was created with")
    def _():
        plain = client.get_collection(PLAIN)
        eq(plain.status, models.CollectionStatus.GREEN, "status")
        eq(plain.points_count, 0, "points_count")
        vp = plain.config.params.vectors
        eq((vp.size, vp.distance), (4, models.Distance.DOT), "plain vectors")
        eq(plain.config.hnsw_config.m, 16, "m")
        eq(plain.config.hnsw_config.ef_construct, 100, "ef_construct")
        eq(plain.config.hnsw_config.full_scan_threshold, 10_000, "full_scan_threshold")
        eq(plain.config.optimizer_config.default_segment_number, 2, "default_segment_number")
        eq(plain.config.quantization_config, None, "no quantization")
        eq(plain.payload_schema, {}, "payload_schema")

        named = client.get_collection(NAMED)
        v = named.config.params.vectors
        eq((v["image"].size, v["image"].distance), (4, models.Distance.COSINE), "image params")
        eq((v["text"].size, v["text"].distance), (2, models.Distance.EUCLID), "text params")
        eq(v["text"].hnsw_config.m if v["text"].hnsw_config else None, 8, "text hnsw m")
        eq((named.config.hnsw_config.m, named.config.hnsw_config.ef_construct), (12, 64), "named hnsw")
        q = named.config.quantization_config
        eq((q.scalar.type, q.scalar.always_ram), (models.ScalarType.INT8, True), "quantization")
        # The contract's `quantile` is a 32-bit float: over gRPC 0.99 comes back as the float nearest to it.
        if grpc:
            near(q.scalar.quantile, 0.99, "quantile", eps=1e-7)
        else:
            eq(q.scalar.quantile, 0.99, "quantile")
        raises_status(404, lambda: client.get_collection("py_nope"), "get a missing collection")

    @step("update_collection changes optimizer and params settings")
    def _():
        eq(
            client.update_collection(
                PLAIN,
                optimizers_config=models.OptimizersConfigDiff(indexing_threshold=20_000),
                collection_params=models.CollectionParamsDiff(on_disk_payload=False),
            ),
            True,
            "update",
        )
        info = client.get_collection(PLAIN)
        eq(info.config.optimizer_config.indexing_threshold, 20_000, "indexing_threshold")
        eq(info.config.params.on_disk_payload, False, "on_disk_payload")

    @step("create_payload_index: keyword and integer indexes appear in payload_schema")
    def _():
        r = client.create_payload_index(PLAIN, "city", field_schema=models.PayloadSchemaType.KEYWORD, wait=True)
        eq(r.status, models.UpdateStatus.COMPLETED, "city status")
        r = client.create_payload_index(
            PLAIN, "count", field_schema=models.IntegerIndexParams(type=models.IntegerIndexType.INTEGER, range=True, lookup=True), wait=True
        )
        eq(r.status, models.UpdateStatus.COMPLETED, "count status")
        schema = client.get_collection(PLAIN).payload_schema
        eq(schema["city"].data_type, models.PayloadSchemaType.KEYWORD, "city type")
        eq(schema["count"].data_type, models.PayloadSchemaType.INTEGER, "count type")

    @step("upsert: PointStruct list and Batch, integer and UUID ids, wait=True")
    def _():
        r1 = client.upsert(
            PLAIN,
            wait=True,
            points=[
                models.PointStruct(id=1, vector=[1, 0, 0, 0], payload={"city": "Berlin", "count": 1, "tags": ["a", "b"], "nested": {"x": 1, "y": "z"}}),
                models.PointStruct(id=2, vector=[0, 1, 0, 0], payload={"city": "London", "count": 2, "tags": ["b"]}),
                models.PointStruct(id=3, vector=[0, 0, 1, 0], payload={"city": "Berlin", "count": 3}),
                models.PointStruct(id=4, vector=[0, 0, 0, 1], payload={"city": "Paris", "count": 4}),
                models.PointStruct(id=5, vector=[0.9, 0.1, 0, 0], payload={"city": "London", "count": 5}),
                models.PointStruct(id=UUID_A, vector=[0.5, 0.5, 0, 0], payload={"city": "Paris", "count": 6}),
            ],
        )
        eq(r1.status, models.UpdateStatus.COMPLETED, "points status")
        if not isinstance(r1.operation_id, int):
            raise AssertionError(f"operation_id: {r1.operation_id!r}")
        r2 = client.upsert(
            PLAIN,
            wait=True,
            points=models.Batch(
                ids=[7, 8, UUID_B],
                vectors=[[0, 0, 0.5, 0.5], [0.1, 0.1, 0.1, 0.1], [0, 0.2, 0, 0.8]],
                payloads=[{"city": "Rome", "count": 7}, {"city": "Rome", "count": 8}, {"city": "Oslo", "count": 9}],
            ),
        )
        eq(r2.status, models.UpdateStatus.COMPLETED, "batch status")
        if not (r2.operation_id or -1) > r1.operation_id:
            raise AssertionError(f"operation ids do not grow: {r1.operation_id} then {r2.operation_id}")
        raises_status(
            400, lambda: client.upsert(PLAIN, wait=True, points=[models.PointStruct(id=99, vector=[1, 2, 3])]), "wrong dimension"
        )
        eq(client.get_collection(PLAIN).points_count, 9, "points_count")

    @step("upsert: named vectors, one point with only some of them")
    def _():
        r = client.upsert(
            NAMED,
            wait=True,
            points=[
                models.PointStruct(id=10, vector={"image": [1, 0, 0, 0], "text": [0, 0]}, payload={"kind": "cat"}),
                models.PointStruct(id=11, vector={"image": [0, 1, 0, 0], "text": [1, 1]}, payload={"kind": "dog"}),
                models.PointStruct(id=12, vector={"image": [1, 1, 0, 0]}, payload={"kind": "cat"}),
                models.PointStruct(id=13, vector={"text": [3, 4]}, payload={"kind": "bird"}),
            ],
        )
        eq(r.status, models.UpdateStatus.COMPLETED, "status")
        eq(client.get_collection(NAMED).points_count, 4, "points_count")

    @step("upload_points: the client's batching uploader")
    def _():
        client.upload_points(
            PLAIN,
            points=[models.PointStruct(id=100 + i, vector=[0, 0, 0, 0.01 * (i + 1)], payload={"city": "Upload", "count": 100 + i}) for i in range(5)],
            batch_size=2,
            wait=True,
        )
        eq(client.count(PLAIN, count_filter=models.Filter(must=[city("Upload")]), exact=True).count, 5, "uploaded")
        client.delete(PLAIN, points_selector=models.FilterSelector(filter=models.Filter(must=[city("Upload")])), wait=True)
        eq(client.count(PLAIN, exact=True).count, 9, "after removing them")

    @step("retrieve: payload, vectors, UUID ids normalised, missing ids left out")
    def _():
        pts = client.retrieve(PLAIN, ids=[1, UUID_B, 424242], with_payload=True, with_vectors=True)
        eq(sorted(map(str, ids(pts))), sorted(["1", UUID_B_NORM]), "ids")
        p = by_id(pts)
        eq(p[1].payload, {"city": "Berlin", "count": 1, "tags": ["a", "b"], "nested": {"x": 1, "y": "z"}}, "payload of 1")
        eq(p[1].vector, [1, 0, 0, 0], "vector of 1")
        eq(p[UUID_B_NORM].payload, {"city": "Oslo", "count": 9}, "payload of UUID_B")
        bare = client.retrieve(PLAIN, ids=[2], with_payload=False, with_vectors=False)
        # The client reads a gRPC record's payload map as a dict, empty when none was sent.
        eq((ids(bare), bare[0].payload, bare[0].vector), ([2], {} if grpc else None, None), "bare record")

    @step("retrieve: selected named vectors")
    def _():
        p = by_id(client.retrieve(NAMED, ids=[11, 13], with_vectors=["text"]))
        eq(p[11].vector, {"text": [1, 1]}, "vectors of 11")
        eq(p[13].vector, {"text": [3, 4]}, "vectors of 13")
        eq(p[11].payload, {"kind": "dog"}, "payload of 11")

    @step("set_payload (by ids, under a key, by filter), delete_payload, overwrite_payload")
    def _():
        eq(client.set_payload(PLAIN, payload={"color": "red"}, points=[1, 2], wait=True).status, models.UpdateStatus.COMPLETED, "set")
        client.set_payload(PLAIN, payload={"w": 2}, points=[1], key="nested", wait=True)
        client.set_payload(PLAIN, payload={"fr": True}, points=models.Filter(must=[city("Paris")]), wait=True)
        p = by_id(client.retrieve(PLAIN, ids=[1, 2, 4, UUID_A]))
        eq(p[1].payload, {"city": "Berlin", "count": 1, "tags": ["a", "b"], "nested": {"x": 1, "y": "z", "w": 2}, "color": "red"}, "1 after set")
        eq(p[2].payload, {"city": "London", "count": 2, "tags": ["b"], "color": "red"}, "2 after set")
        eq((p[4].payload.get("fr"), p[UUID_A].payload.get("fr")), (True, True), "set by filter")

        client.delete_payload(PLAIN, keys=["color", "nested.x"], points=[1], wait=True)
        eq(client.retrieve(PLAIN, ids=[1])[0].payload, {"city": "Berlin", "count": 1, "tags": ["a", "b"], "nested": {"y": "z", "w": 2}}, "1 after delete")
        client.overwrite_payload(PLAIN, payload={"city": "London", "count": 2}, points=[2], wait=True)
        eq(client.retrieve(PLAIN, ids=[2])[0].payload, {"city": "London", "count": 2}, "2 after overwrite")

    @step("clear_payload on a named-vector point")
    def _():
        eq(client.clear_payload(NAMED, points_selector=[13], wait=True).status, models.UpdateStatus.COMPLETED, "status")
        eq(client.retrieve(NAMED, ids=[13])[0].payload or {}, {}, "payload of 13")

    @step("update_vectors and delete_vectors on named vectors")
    def _():
        r = client.update_vectors(
            NAMED,
            points=[models.PointVectors(id=12, vector={"text": [6, 8]}), models.PointVectors(id=13, vector={"image": [0, 0, 1, 0]})],
            wait=True,
        )
        eq(r.status, models.UpdateStatus.COMPLETED, "update status")
        p = by_id(client.retrieve(NAMED, ids=[12, 13], with_vectors=True))
        eq(p[12].vector["text"], [6, 8], "text of 12")
        near(p[12].vector["image"][0], math.sqrt(0.5), "cosine vectors are stored normalised")
        eq(p[13].vector, {"image": [0, 0, 1, 0], "text": [3, 4]}, "vectors of 13")
        eq(client.delete_vectors(NAMED, vectors=["text"], points=[12], wait=True).status, models.UpdateStatus.COMPLETED, "delete status")
        v12 = client.retrieve(NAMED, ids=[12], with_vectors=True)[0].vector
        eq(sorted(v12), ["image"], "vectors left on 12")

    @step("batch_update_points applies its operations in order")
    def _():
        res = client.batch_update_points(
            PLAIN,
            wait=True,
            update_operations=[
                models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=20, vector=[0.2] * 4, payload={"city": "Tmp", "count": 20})])),
                models.SetPayloadOperation(set_payload=models.SetPayload(payload={"extra": 1}, points=[20])),
                models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload={"city": "Tmp2", "count": 21}, points=[20])),
                models.DeletePayloadOperation(delete_payload=models.DeletePayload(keys=["count"], points=[20])),
                models.UpdateVectorsOperation(update_vectors=models.UpdateVectors(points=[models.PointVectors(id=20, vector=[0, 0, 0, 2])])),
                models.UpsertOperation(upsert=models.PointsList(points=[models.PointStruct(id=21, vector=[1] * 4, payload={"city": "Gone"})])),
                models.DeleteOperation(delete=models.PointIdsList(points=[21])),
            ],
        )
        eq(len(res), 7, "results")
        eq({r.status for r in res}, {models.UpdateStatus.COMPLETED}, "statuses")
        pts = client.retrieve(PLAIN, ids=[20, 21], with_vectors=True)
        eq(ids(pts), [20], "ids")
        eq((pts[0].payload, pts[0].vector), ({"city": "Tmp2"}, [0, 0, 0, 2]), "point 20")
        client.delete(PLAIN, points_selector=[20], wait=True)

    @step("scroll: id order, pages with offset, filter, order_by")
    def _():
        pts, nxt = client.scroll(PLAIN, limit=100, with_payload=False)
        eq(ids(pts), [1, 2, 3, 4, 5, 7, 8, UUID_A, UUID_B_NORM], "all ids (integers, then UUIDs)")
        eq(nxt, None, "no next page")
        pts, nxt = client.scroll(PLAIN, limit=3)
        eq((ids(pts), nxt, pts[0].payload["city"]), ([1, 2, 3], 4, "Berlin"), "page 1")
        pts, nxt = client.scroll(PLAIN, limit=3, offset=nxt)
        eq((ids(pts), nxt), ([4, 5, 7], 8), "page 2")
        pts, _n = client.scroll(PLAIN, scroll_filter=models.Filter(must=[city("Berlin")]), with_payload=["count"], limit=10)
        eq([(p.id, p.payload) for p in pts], [(1, {"count": 1}), (3, {"count": 3})], "filter + payload include")
        pts, _n = client.scroll(
            PLAIN,
            scroll_filter=models.Filter(
                must=[models.FieldCondition(key="count", range=models.Range(gte=3, lt=7))],
                must_not=[models.HasIdCondition(has_id=[UUID_A])],
            ),
            limit=10,
        )
        eq(ids(pts), [3, 4, 5], "range + has_id")
        pts, _n = client.scroll(PLAIN, order_by=models.OrderBy(key="count", direction=models.Direction.DESC), limit=4)
        eq([(p.id, p.payload["count"]) for p in pts], [(UUID_B_NORM, 9), (8, 8), (7, 7), (UUID_A, 6)], "order_by desc")
        pts, _n = client.scroll(PLAIN, order_by=models.OrderBy(key="count", start_from=4), limit=2)
        eq(ids(pts), [4, 5], "order_by start_from")

    @step("count: exact, with and without a filter")
    def _():
        eq(client.count(PLAIN, exact=True).count, 9, "all")
        f = models.Filter(should=[models.FieldCondition(key="city", match=models.MatchAny(any=["London", "Rome"]))])
        eq(client.count(PLAIN, count_filter=f, exact=True).count, 4, "London or Rome")
        eq(client.count(NAMED).count, 4, "named")

    @step("query_points: by vector, by id, nearest with filter/params/payload selectors, threshold, offset")
    def _():
        r = client.query_points(PLAIN, query=[1, 0, 0, 0], limit=3, with_payload=True)
        eq(ids(r.points), [1, 5, UUID_A], "by vector")
        for p, s in zip(r.points, [1, 0.9, 0.5]):
            near(p.score, s, f"score of {p.id}")
        eq((r.points[0].payload["city"], r.points[0].vector), ("Berlin", None), "payload, no vector")
        # A point id as the query: its own vector, and the point itself left out.
        eq(ids(client.query_points(PLAIN, query=1, limit=2).points), [5, UUID_A], "by id")
        r = client.query_points(
            PLAIN,
            query=models.NearestQuery(nearest=[1, 0, 0, 0]),
            query_filter=models.Filter(must=[city("London")]),
            search_params=models.SearchParams(hnsw_ef=64, exact=True),
            with_payload=models.PayloadSelectorInclude(include=["city"]),
            with_vectors=True,
            limit=5,
        )
        eq(ids(r.points), [5, 2], "nearest + filter")
        eq(r.points[0].payload, {"city": "London"}, "include selector")
        near(r.points[0].vector[0], 0.9, "vector of 5")
        r = client.query_points(PLAIN, query=[1, 0, 0, 0], with_payload=models.PayloadSelectorExclude(exclude=["tags", "nested", "count"]), limit=1)
        eq(r.points[0].payload, {"city": "Berlin"}, "exclude selector")
        eq(ids(client.query_points(PLAIN, query=[1, 0, 0, 0], score_threshold=0.6, limit=10).points), [1, 5], "score_threshold")
        eq(ids(client.query_points(PLAIN, query=[1, 0, 0, 0], offset=1, limit=2).points), [5, UUID_A], "offset")
        r = client.query_points(PLAIN, query=models.RecommendQuery(recommend=models.RecommendInput(positive=[1], negative=[2])), limit=2)
        eq(ids(r.points), [5, UUID_A], "recommend query")
        r = client.query_points(PLAIN, query_filter=models.Filter(must=[city("Rome")]), limit=10)
        eq(sorted(ids(r.points)), [7, 8], "no query: filter only")

    @step("query_points_groups: the best hits per city, as grouping the exact ranking by hand; with_lookup")
    def _():
        exact = models.SearchParams(exact=True)
        full = client.query_points(PLAIN, query=[1, 0, 0, 0], limit=100, with_payload=True, search_params=exact).points
        order, hits = [], {}
        for p in full:
            c = (p.payload or {}).get("city")
            if not isinstance(c, str):
                continue
            if c not in hits:
                order.append(c)
                hits[c] = []
            if len(hits[c]) < 2:
                hits[c].append(p.id)
        want = [(c, hits[c]) for c in order[:3]]
        if len(want) < 2:
            raise AssertionError(f"the data has too few cities to group: {want}")
        r = client.query_points_groups(PLAIN, group_by="city", query=[1, 0, 0, 0], limit=3, group_size=2, search_params=exact)
        eq([(g.id, [h.id for h in g.hits]) for g in r.groups], want, "groups")
        eq([h.payload["city"] for g in r.groups for h in g.hits], [c for c, ids_ in want for _ in ids_], "payload of the hits (with_payload defaults to true)")
        r = client.query_points_groups(
            PLAIN, group_by="city", query=[1, 0, 0, 0], limit=1, group_size=1, with_payload=False, with_lookup=models.WithLookup(collection=NAMED)
        )
        eq((r.groups[0].id, r.groups[0].hits[0].payload, r.groups[0].lookup), (want[0][0], None, None), "a city is not a point id: no lookup")

    @step("query_points with using: named vectors")
    def _():
        r = client.query_points(NAMED, query=[1, 0, 0, 0], using="image", limit=2)
        eq(ids(r.points), [10, 12], "image")
        near(r.points[0].score, 1, "cosine of 10")
        near(r.points[1].score, math.sqrt(0.5), "cosine of 12")
        r = client.query_points(NAMED, query=[0, 0], using="text", limit=10)
        eq(ids(r.points), [10, 11, 13], "text (12 has no text vector)")
        near(r.points[1].score, math.sqrt(2), "euclid of 11")
        near(r.points[2].score, 5, "euclid of 13")

    @step("query_points hybrid: two named dense prefetches fused by RRF (and RRF with k, DBSF), re-scored, batched")
    def _():
        # image (cosine) to [1, 0, 0, 0], 2 best: 10, 12; text (euclid) to [1, 1]: 11, 10, 13 (12 has no text vector now).
        prefetch = [
            models.Prefetch(query=[1, 0, 0, 0], using="image", limit=2),
            models.Prefetch(query=[1, 1], using="text", limit=3),
        ]
        r = client.query_points(NAMED, prefetch=prefetch, query=models.FusionQuery(fusion=models.Fusion.RRF), limit=10)
        # RRF, k = 2: 10 = 1/2 + 1/3, 11 = 1/2, 12 = 1/3, 13 = 1/4.
        eq(ids(r.points), [10, 11, 12, 13], "rrf order")
        for p, s in zip(r.points, [1 / 2 + 1 / 3, 1 / 2, 1 / 3, 1 / 4]):
            near(p.score, s, f"rrf score of {p.id}", 1e-5)
        r = client.query_points(NAMED, prefetch=prefetch, query=models.RrfQuery(rrf=models.Rrf(k=10)), limit=2, offset=1)
        eq(ids(r.points), [11, 12], "rrf k=10 with offset")
        near(r.points[0].score, 1 / 10, "rrf k=10 score of 11", 1e-5)
        r = client.query_points(NAMED, prefetch=prefetch, query=models.FusionQuery(fusion=models.Fusion.DBSF), limit=1, with_payload=True)
        eq((ids(r.points), r.points[0].payload), ([10], {"kind": "cat"}), "dbsf best, with payload")
        # A dense query over the prefetched candidates re-scores only them: cosine to [0, 1, 2, 0].
        r = client.query_points(NAMED, prefetch=prefetch, query=[0, 1, 2, 0], using="image", limit=10)
        eq(ids(r.points), [13, 11, 12, 10], "re-scored candidates")
        res = client.query_batch_points(
            NAMED,
            requests=[
                models.QueryRequest(prefetch=prefetch, query=models.FusionQuery(fusion=models.Fusion.RRF), limit=2),
                models.QueryRequest(query=[1, 0, 0, 0], using="image", limit=1),
            ],
        )
        eq([ids(x.points) for x in res], [[10, 11], [10]], "hybrid in a batch")
        raises_status(400, lambda: client.query_points(NAMED, prefetch=prefetch, limit=2), "prefetch without a query")

    @step("hybrid search: dense + sparse (models.SparseVector) prefetches fused by RRF, ids and scores against a hand computation")
    def _():
        eq(
            client.create_collection(
                HYBRID,
                vectors_config={"dense": models.VectorParams(size=4, distance=models.Distance.DOT)},
                sparse_vectors_config={"text": models.SparseVectorParams(index=models.SparseIndexParams(on_disk=False))},
            ),
            True,
            "create",
        )
        try:
            info = client.get_collection(HYBRID)
            eq(sorted((info.config.params.sparse_vectors or {}).keys()), ["text"], "sparse config shown")
            dense = {1: [0.9, 0.1, 0, 0], 2: [0.2, 0.8, 0.1, 0], 3: [0.5, 0.5, 0.5, 0], 4: [0, 0.1, 0.9, 0.3], 5: [0.1, 0, 0, 1.0], 6: [0.7, 0.6, 0, 0]}
            # Point 6 has no sparse vector: the sparse search never finds it.
            sparse = {1: {1: 0.5, 7: 0.2}, 2: {3: 1.0, 7: 0.9}, 3: {1: 0.1, 3: 0.3, 100: 2.0}, 4: {7: 0.4, 42: 1.5}, 5: {3: 0.05}}

            def sv(d: dict) -> models.SparseVector:
                return models.SparseVector(indices=list(d.keys()), values=list(d.values()))

            points = [
                models.PointStruct(id=i, vector={"dense": dense[i], **({"text": sv(sparse[i])} if i in sparse else {})}, payload={"n": i})
                for i in dense
            ]
            eq(client.upsert(HYBRID, points=points, wait=True).status, models.UpdateStatus.COMPLETED, "upsert")
            eq(client.count(HYBRID, exact=True).count, 6, "count")

            qd = [1, 0.3, 0.2, 0]
            qs = {3: 0.5, 7: 1.0, 100: 0.3}
            dense_scores = {i: dot(v, qd) for i, v in dense.items()}
            sparse_scores = {i: sparse_dot(qs, v) for i, v in sparse.items() if sparse_dot(qs, v) != 0}

            # Each prefetch alone: exact dense and sparse scoring.
            r = client.query_points(HYBRID, query=sv(qs), using="text", limit=10)
            eq(ids(r.points), top(sparse_scores, 10), "sparse alone (6 has no sparse vector)")
            for p in r.points:
                near(p.score, sparse_scores[p.id], f"sparse score of {p.id}", 1e-5)
            r = client.query_points(HYBRID, query=qd, using="dense", limit=4)
            eq(ids(r.points), top(dense_scores, 4), "dense alone")

            prefetch = [
                models.Prefetch(query=qd, using="dense", limit=4),
                models.Prefetch(query=sv(qs), using="text", limit=3),
            ]
            lists = [top(dense_scores, 4), top(sparse_scores, 3)]
            for query, k in [(models.FusionQuery(fusion=models.Fusion.RRF), 2), (models.RrfQuery(rrf=models.Rrf(k=5)), 5)]:
                expected = rrf_by_hand(lists, k)
                r = client.query_points(HYBRID, prefetch=prefetch, query=query, limit=10, with_payload=True)
                eq(ids(r.points), [pid for pid, _ in expected], f"rrf k={k} order")
                for p, (pid, score) in zip(r.points, expected):
                    near(p.score, score, f"rrf k={k} score of {pid}", 1e-6)
                    eq(p.payload, {"n": pid}, f"payload of {pid}")
                # limit and offset cut the fused list.
                r = client.query_points(HYBRID, prefetch=prefetch, query=query, limit=2, offset=1)
                eq(ids(r.points), [pid for pid, _ in expected[1:3]], f"rrf k={k} limit 2 offset 1")
            # Same through the batch endpoint, and with a filter on the sparse prefetch.
            filtered = [prefetch[0], models.Prefetch(query=sv(qs), using="text", limit=3, filter=models.Filter(must_not=[models.HasIdCondition(has_id=[4])]))]
            res = client.query_batch_points(HYBRID, requests=[models.QueryRequest(prefetch=filtered, query=models.FusionQuery(fusion=models.Fusion.RRF), limit=10)])
            expected = rrf_by_hand([top(dense_scores, 4), top({i: s for i, s in sparse_scores.items() if i != 4}, 3)], 2)
            eq(ids(res[0].points), [pid for pid, _ in expected], "batched rrf with a filtered sparse prefetch")
            for p, (pid, score) in zip(res[0].points, expected):
                near(p.score, score, f"batched rrf score of {pid}", 1e-6)
        finally:
            eq(client.delete_collection(HYBRID), True, "delete")

    @step("ColBERT-style re-rank: a dense prefetch, then a multivector (max_sim, hnsw m=0) query over its candidates, against MaxSim by hand")
    def _():
        eq(
            client.create_collection(
                COLBERT,
                vectors_config={
                    "dense": models.VectorParams(size=4, distance=models.Distance.DOT),
                    "colbert": models.VectorParams(
                        size=3,
                        distance=models.Distance.COSINE,
                        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
                        hnsw_config=models.HnswConfigDiff(m=0),
                    ),
                },
            ),
            True,
            "create",
        )
        try:
            info = client.get_collection(COLBERT)
            colbert_params = info.config.params.vectors["colbert"]
            eq(colbert_params.multivector_config.comparator, models.MultiVectorComparator.MAX_SIM, "multivector_config shown")
            eq(colbert_params.hnsw_config.m, 0, "hnsw m=0 shown")
            dense = {1: [1, 0, 0, 0.1], 2: [0.8, 0.4, 0, 0], 3: [0.6, 0, 0.5, 0], 4: [0.1, 0.9, 0, 0], 5: [0.7, 0.2, 0.2, 0.1]}
            colbert = {
                1: [[1, 0, 0], [0, 1, 0]],
                2: [[0.5, 0.5, 0], [0, 0, 1], [1, 0.2, 0]],
                3: [[0, 1, 1], [1, 1, 0]],
                4: [[1, 0, 0.1], [0, 0.2, 1]],
                5: [[0.3, 1, 0], [0.9, 0, 0.4]],
            }
            points = [models.PointStruct(id=i, vector={"dense": dense[i], "colbert": colbert[i]}) for i in dense]
            eq(client.upsert(COLBERT, points=points, wait=True).status, models.UpdateStatus.COMPLETED, "upsert")
            r = client.retrieve(COLBERT, ids=[2], with_vectors=["colbert"])
            got = r[0].vector["colbert"]
            eq(len(got), 3, "a multivector comes back as its 3 vectors")
            for g, w in zip(got, colbert[2]):
                for a, b in zip(g, unit(w)):
                    near(a, b, "stored multivector (cosine: normalised)", 1e-5)

            qd = [1, 0.2, 0.1, 0]
            qc = [[1, 0.1, 0], [0, 0.3, 1]]
            dense_scores = {i: dot(v, qd) for i, v in dense.items()}
            maxsim = {i: max_sim_cosine(qc, d) for i, d in colbert.items()}
            # The multivector alone (no graph: an exact scan) finds 4 best.
            r = client.query_points(COLBERT, query=qc, using="colbert", limit=2)
            eq(ids(r.points), top(maxsim, 2), "multivector alone")
            for p in r.points:
                near(p.score, maxsim[p.id], f"MaxSim of {p.id}", 1e-5)
            # Re-rank: only the dense prefetch's 4 candidates (4 is not among them), ordered by MaxSim.
            candidates = top(dense_scores, 4)
            if 4 in candidates or top(maxsim, 1) != [4]:
                raise AssertionError("test data: 4 must be the MaxSim best and outside the dense candidates")
            expected = top({i: maxsim[i] for i in candidates}, 3)
            r = client.query_points(COLBERT, prefetch=models.Prefetch(query=qd, using="dense", limit=4), query=qc, using="colbert", limit=3)
            eq(ids(r.points), expected, "re-ranked candidates")
            for p in r.points:
                near(p.score, maxsim[p.id], f"re-rank MaxSim of {p.id}", 1e-5)
        finally:
            eq(client.delete_collection(COLBERT), True, "delete")

    @step("query_batch_points answers each request in order")
    def _():
        res = client.query_batch_points(
            PLAIN,
            requests=[
                models.QueryRequest(query=[0, 0, 0, 1], limit=1),
                models.QueryRequest(query=[0, 1, 0, 0], limit=2, filter=models.Filter(must_not=[city("London")])),
            ],
        )
        eq([ids(r.points) for r in res], [[4], [UUID_A, UUID_B_NORM]], "batch")

    @step("search (the older API, through client.http.search_api, and over gRPC its Search RPCs) and search_batch")
    def _():
        res = client.http.search_api.search_points(
            collection_name=PLAIN,
            search_request=models.SearchRequest(
                vector=[0, 0, 1, 0], limit=2, with_payload=True, filter=models.Filter(must=[models.FieldCondition(key="count", range=models.Range(lte=7))])
            ),
        ).result
        eq(ids(res), [3, 7], "search")
        near(res[0].score, 1, "score of 3")
        near(res[1].score, 0.5, "score of 7")
        eq(res[0].payload, {"city": "Berlin", "count": 3}, "payload of 3")
        res = client.http.search_api.search_points(
            collection_name=NAMED, search_request=models.SearchRequest(vector=models.NamedVector(name="image", vector=[0, 1, 0, 0]), limit=1)
        ).result
        eq(ids(res), [11], "named search")
        batch = client.http.search_api.search_batch_points(
            collection_name=PLAIN,
            search_request_batch=models.SearchRequestBatch(
                searches=[models.SearchRequest(vector=[1, 0, 0, 0], limit=1), models.SearchRequest(vector=[0, 0, 0, 1], limit=2, with_payload=["city"])]
            ),
        ).result
        eq([ids(b) for b in batch], [[1], [4, UUID_B_NORM]], "search batch")
        eq(batch[1][0].payload, {"city": "Paris"}, "payload selector in batch")
        if grpc:
            # The same searches through the client's own gRPC stubs (its high-level API has no search any more).
            to_rest = GrpcToRest.convert_scored_point
            res = [to_rest(p) for p in client.grpc_points.Search(
                pb.SearchPoints(collection_name=PLAIN, vector=[0, 0, 1, 0], limit=2, with_payload=pb.WithPayloadSelector(enable=True),
                                filter=RestToGrpc.convert_filter(models.Filter(must=[models.FieldCondition(key="count", range=models.Range(lte=7))]))),
                timeout=30).result]
            eq([(p.id, p.payload) for p in res], [(3, {"city": "Berlin", "count": 3}), (7, {"city": "Rome", "count": 7})], "gRPC Search")
            near(res[1].score, 0.5, "score of 7 over gRPC")
            res = client.grpc_points.Search(pb.SearchPoints(collection_name=NAMED, vector=[0, 1, 0, 0], vector_name="image", limit=1), timeout=30).result
            eq([to_rest(p).id for p in res], [11], "gRPC named Search")
            batch = client.grpc_points.SearchBatch(
                pb.SearchBatchPoints(collection_name=PLAIN, search_points=[
                    pb.SearchPoints(collection_name=PLAIN, vector=[1, 0, 0, 0], limit=1),
                    pb.SearchPoints(collection_name=PLAIN, vector=[0, 0, 0, 1], limit=2, with_payload=pb.WithPayloadSelector(include=pb.PayloadIncludeSelector(fields=["city"]))),
                ]),
                timeout=30).result
            eq([[to_rest(p).id for p in b.result] for b in batch], [[1], [4, UUID_B_NORM]], "gRPC SearchBatch")
            eq(to_rest(batch[1].result[0]).payload, {"city": "Paris"}, "payload selector in the gRPC batch")

    @step("recommend (the older API, through client.http.search_api, and over gRPC its Recommend RPCs)")
    def _():
        res = client.http.search_api.recommend_points(
            collection_name=PLAIN, recommend_request=models.RecommendRequest(positive=[1], negative=[2], limit=2, with_payload=True)
        ).result
        eq(ids(res), [5, UUID_A], "recommend by ids")
        near(res[0].score, 1.7, "score of 5")
        res = client.http.search_api.recommend_points(
            collection_name=PLAIN, recommend_request=models.RecommendRequest(positive=[[0, 0, 1, 0]], limit=1)
        ).result
        eq(ids(res), [3], "recommend by vector")
        res = client.http.search_api.recommend_points(
            collection_name=NAMED, recommend_request=models.RecommendRequest(positive=[10], using="image", limit=1)
        ).result
        eq(ids(res), [12], "recommend using")
        if grpc:
            to_rest = GrpcToRest.convert_scored_point
            pid = RestToGrpc.convert_extended_point_id
            res = [to_rest(p) for p in client.grpc_points.Recommend(
                pb.RecommendPoints(collection_name=PLAIN, positive=[pid(1)], negative=[pid(2)], limit=2, with_payload=pb.WithPayloadSelector(enable=True)), timeout=30).result]
            eq(ids(res), [5, UUID_A], "gRPC Recommend by ids")
            near(res[0].score, 1.7, "score of 5 over gRPC")
            res = client.grpc_points.Recommend(
                pb.RecommendPoints(collection_name=PLAIN, positive_vectors=[pb.Vector(dense=pb.DenseVector(data=[0, 0, 1, 0]))], limit=1), timeout=30).result
            eq([to_rest(p).id for p in res], [3], "gRPC Recommend by vector")
            batch = client.grpc_points.RecommendBatch(
                pb.RecommendBatchPoints(collection_name=NAMED, recommend_points=[pb.RecommendPoints(collection_name=NAMED, positive=[pid(10)], using="image", limit=1)]), timeout=30).result
            eq([[to_rest(p).id for p in b.result] for b in batch], [[12]], "gRPC RecommendBatch using")

    @step("delete points by id and by filter")
    def _():
        eq(client.delete(PLAIN, points_selector=models.PointIdsList(points=[8, UUID_B]), wait=True).status, models.UpdateStatus.COMPLETED, "by id")
        eq(client.delete(PLAIN, points_selector=models.FilterSelector(filter=models.Filter(must=[city("Paris")])), wait=True).status, models.UpdateStatus.COMPLETED, "by filter")
        pts, _n = client.scroll(PLAIN, limit=100, with_payload=False)
        eq(ids(pts), [1, 2, 3, 5, 7], "left")
        eq(client.count(PLAIN, exact=True).count, 5, "count")

    @step("aliases: create, list, use, rename, delete")
    def _():
        eq(client.update_collection_aliases(change_aliases_operations=[models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=PLAIN, alias_name=ALIAS))]), True, "create")
        eq([(a.alias_name, a.collection_name) for a in client.get_collection_aliases(PLAIN).aliases], [(ALIAS, PLAIN)], "collection aliases")
        eq(client.get_collection_aliases(NAMED).aliases, [], "no aliases of named")
        eq([(a.alias_name, a.collection_name) for a in client.get_aliases().aliases], [(ALIAS, PLAIN)], "all aliases")
        eq(ids(client.query_points(ALIAS, query=[1, 0, 0, 0], limit=1).points), [1], "query via alias")
        eq(client.get_collection(ALIAS).points_count, 5, "collection via alias")
        client.update_collection_aliases(change_aliases_operations=[models.RenameAliasOperation(rename_alias=models.RenameAlias(old_alias_name=ALIAS, new_alias_name=ALIAS + "2"))])
        eq([a.alias_name for a in client.get_aliases().aliases], [ALIAS + "2"], "renamed")
        client.update_collection_aliases(change_aliases_operations=[models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=ALIAS + "2"))])
        eq(client.get_aliases().aliases, [], "deleted")

    # -- snapshots (Quiver's default priority is `replica`, so data recoveries name `snapshot`) --

    snap = "py_snap"
    ts_re = r"\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}"
    kept: dict = {}

    def snap_points(name: str) -> list:
        pts, _n = client.scroll(name, limit=100, with_payload=True, with_vectors=True)
        return [(p.id, p.payload, p.vector) for p in pts]

    def download(path: str) -> bytes:
        with urllib.request.urlopen(url + path, timeout=30) as res:
            if res.headers.get_content_type() != "application/octet-stream":
                raise AssertionError(f"{path}: content-type {res.headers.get('content-type')!r}")
            return res.read()

    def with_checksum(d, collection: str | None):
        """Over gRPC the client hands back descriptions without their checksum (its conversion
        of SnapshotDescription leaves out the field the server sends): take it from the REST
        listing, so the steps below check it all the same."""
        if not grpc or d is None:
            return d
        api = client.http.snapshots_api
        listed = api.list_snapshots(collection_name=collection).result if collection is not None else api.list_full_snapshots().result
        return d.model_copy(update={"checksum": next((x.checksum for x in listed if x.name == d.name), None)})

    def as_listed(d):
        """`d` as the client's own listing shows it (over gRPC: without the checksum, as above)."""
        return d.model_copy(update={"checksum": None}) if grpc else d

    def check_description(d, pattern: str, what: str) -> None:
        if d is None or not re.fullmatch(pattern, d.name):
            raise AssertionError(f"{what}: name {getattr(d, 'name', None)!r} does not match {pattern}")
        if not (d.size > 0 and re.fullmatch(r"[0-9a-f]{64}", d.checksum or "") and re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", d.creation_time or "")):
            raise AssertionError(f"{what}: {d!r}")

    @step("create_snapshot and list_snapshots; the download matches size and checksum; wait=False answers at once (gRPC: the snapshot is made)")
    def _():
        client.create_collection(snap, vectors_config=models.VectorParams(size=4, distance=models.Distance.DOT), shard_number=2)
        client.create_payload_index(snap, "g", field_schema=models.PayloadSchemaType.KEYWORD, wait=True)
        client.upsert(snap, wait=True, points=[models.PointStruct(id=i, vector=[i, 1, 0, -i], payload={"g": "odd" if i % 2 else "even", "i": i}) for i in range(1, 11)])
        kept["before"] = snap_points(snap)
        d = with_checksum(client.create_snapshot(snap), snap)
        check_description(d, rf"{snap}-\d+-{ts_re}\.snapshot", "create_snapshot")
        eq(client.list_snapshots(snap), [as_listed(d)], "list_snapshots")
        data = download(f"/collections/{snap}/snapshots/{d.name}")
        eq((len(data), hashlib.sha256(data).hexdigest()), (d.size, d.checksum), "download size and sha256")
        kept["d"], kept["bytes"] = d, data
        if grpc:
            # The contract's CreateSnapshotRequest has no `wait`: the client waits, and gets the description.
            check_description(with_checksum(client.create_snapshot(snap, wait=False), snap), rf"{snap}-\d+-{ts_re}\.snapshot", "create_snapshot over gRPC")
        else:
            eq(client.create_snapshot(snap, wait=False), None, "wait=False hands back no description")
        deadline = time.monotonic() + 30  # a bound for a broken server, not a speed requirement
        while len(client.list_snapshots(snap)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        eq(len(client.list_snapshots(snap)), 2, "the wait=False snapshot is listed")

    @step("recover_snapshot(location=..., priority='snapshot'): checksum checked, data back; replica into a new collection is empty")
    def _():
        d = kept["d"]
        client.delete(snap, points_selector=[1, 2, 3], wait=True)
        location = f"{url}/collections/{snap}/snapshots/{d.name}"
        raises_status(400, lambda: client.recover_snapshot(snap, location=location, priority="snapshot", checksum="0" * 64), "checksum mismatch")
        eq(client.count(snap, exact=True).count, 7, "a checksum mismatch changes nothing")
        eq(client.recover_snapshot(snap, location=location, priority="snapshot", checksum=d.checksum), True, "recover")
        eq(snap_points(snap), kept["before"], "points after recovery")
        info = client.get_collection(snap)
        eq((info.config.params.shard_number, info.payload_schema["g"].data_type), (2, models.PayloadSchemaType.KEYWORD), "config and index")
        eq(client.recover_snapshot(snap + "_copy", location=location, priority=models.SnapshotPriority.SNAPSHOT), True, "recover into a new collection")
        eq(snap_points(snap + "_copy"), kept["before"], "copy")
        eq(client.recover_snapshot(snap + "_replica", location=location, priority="replica"), True, "replica into a new collection")
        replica = client.get_collection(snap + "_replica")
        eq((replica.points_count, replica.config.params.vectors.size), (0, 4), "replica: the configuration, no points")
        raises_status(404, lambda: client.create_snapshot("py_nope"), "snapshot of a missing collection")

    @step("upload: recover_from_uploaded_snapshot through client.http (multipart), priority snapshot")
    def _():
        api = client.http.snapshots_api
        r = api.recover_from_uploaded_snapshot(collection_name=snap + "_upload", priority=models.SnapshotPriority.SNAPSHOT, checksum=kept["d"].checksum, snapshot=io.BytesIO(kept["bytes"]))
        eq(r.result, True, "upload result")
        eq(snap_points(snap + "_upload"), kept["before"], "uploaded points")
        raises_status(
            400,
            lambda: api.recover_from_uploaded_snapshot(collection_name=snap + "_upload", priority=models.SnapshotPriority.SNAPSHOT, checksum="1" * 64, snapshot=io.BytesIO(kept["bytes"])),
            "upload with a wrong checksum",
        )

    @step("delete_snapshot removes both; deleting again is 404")
    def _():
        for d in client.list_snapshots(snap):
            eq(client.delete_snapshot(snap, d.name), True, f"delete {d.name}")
        eq(client.list_snapshots(snap), [], "none left")
        raises_status(404, lambda: client.delete_snapshot(snap, kept["d"].name), "delete again")

    @step("shard snapshots: create_shard_snapshot, list_shard_snapshots, recover_shard_snapshot, delete_shard_snapshot")
    def _():
        d = client.create_shard_snapshot(snap, 1)
        check_description(d, rf"{snap}-shard-1-{ts_re}\.snapshot", "create_shard_snapshot")
        eq(client.list_shard_snapshots(snap, 1), [d], "list shard 1")
        eq(client.list_shard_snapshots(snap, 0), [], "list shard 0")
        client.set_payload(snap, payload={"changed": True}, points=list(range(1, 11)), wait=True)
        location = f"{url}/collections/{snap}/shards/1/snapshots/{d.name}"
        eq(client.recover_shard_snapshot(snap, 1, location=location, priority="snapshot", checksum=d.checksum), True, "recover shard 1")
        after = snap_points(snap)
        before = {pid: (payload, vector) for pid, payload, vector in kept["before"]}
        reverted = [pid for pid, payload, _v in after if "changed" not in payload]
        changed = [pid for pid, payload, _v in after if payload.get("changed") is True]
        if not (reverted and changed and len(reverted) + len(changed) == 10):
            raise AssertionError(f"one shard must come back, the other keep the change: reverted {reverted}, changed {changed}")
        for pid, payload, vector in after:
            if pid in reverted:
                eq((payload, vector), before[pid], f"point {pid} of shard 1")
        raises_status(400, lambda: client.recover_shard_snapshot(snap, 0, location=location, priority="snapshot"), "shard 1's snapshot into shard 0")
        raises_status(404, lambda: client.list_shard_snapshots(snap, 9), "unknown shard")
        eq(client.delete_shard_snapshot(snap, 1, d.name), True, "delete shard snapshot")
        eq(client.list_shard_snapshots(snap, 1), [], "none left")

    @step("full snapshots: create_full_snapshot (a tar with config.json and one snapshot per collection), list_full_snapshots, delete_full_snapshot")
    def _():
        client.update_collection_aliases(change_aliases_operations=[models.CreateAliasOperation(create_alias=models.CreateAlias(collection_name=snap, alias_name="py_snap_alias"))])
        d = with_checksum(client.create_full_snapshot(), None)
        check_description(d, rf"full-snapshot-{ts_re}\.snapshot", "create_full_snapshot")
        eq(client.list_full_snapshots(), [as_listed(d)], "list_full_snapshots")
        data = download(f"/snapshots/{d.name}")
        eq(hashlib.sha256(data).hexdigest(), d.checksum, "sha256 of the full snapshot")
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            config = json.load(tar.extractfile("config.json"))
            names = sorted(m.name for m in tar.getmembers())
        collections = sorted(c.name for c in client.get_collections().collections)
        eq(sorted(config["collections_mapping"]), collections, "collections_mapping")
        eq(config["collections_aliases"], {"py_snap_alias": snap}, "collections_aliases")
        eq(names, sorted(["config.json", *config["collections_mapping"].values()]), "archive entries")
        eq(client.delete_full_snapshot(d.name), True, "delete_full_snapshot")
        eq(client.list_full_snapshots(), [], "none left")
        raises_status(404, lambda: client.delete_full_snapshot(d.name), "delete again")
        client.update_collection_aliases(change_aliases_operations=[models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name="py_snap_alias"))])
        for name in [snap, snap + "_copy", snap + "_replica", snap + "_upload"]:
            eq(client.delete_collection(name), True, f"delete {name}")

    @step("delete_collection removes both collections")
    def _():
        eq(client.delete_collection(PLAIN), True, "plain")
        eq(client.delete_collection(NAMED), True, "named")
        eq(client.delete_collection(PLAIN), False, "again")
        eq(client.get_collections().collections, [], "none left")
        eq(client.collection_exists(PLAIN), False, "exists")


_before_client: set = set()


def join_checks() -> None:
    """Waits for the threads the client started since the last call (its version check)."""
    for t in threading.enumerate():
        if t is not threading.current_thread() and t not in _before_client and t.daemon:
            t.join(timeout=60)
    _before_client.update(threading.enumerate())


def version_check_is_real(caught: list) -> None:
    """Against a server that reports another major version, the client's default check
    warns: so the absence of a warning against Quiver means something."""

    class Other(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the handler's API
            body = json.dumps({"title": "other", "version": "0.1.0"}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet
            pass

    @step("version check: a server reporting 0.1.0 makes the default client warn")
    def _():
        other = ThreadingHTTPServer(("127.0.0.1", 0), Other)
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            # The client checks in a thread of its own: wait for that thread to end
            # before the server goes (a condition, not a fixed wait).
            _before_client.update(threading.enumerate())
            QdrantClient(url=f"http://127.0.0.1:{other.server_address[1]}", timeout=10).close()
            join_checks()
        finally:
            other.shutdown()
            other.server_close()
        mine = [w for w in caught if "0.1.0" in str(w.message)]
        if not mine:
            raise AssertionError(f"no warning about version 0.1.0; recorded: {[str(w.message) for w in caught]}")
        for w in mine:
            caught.remove(w)


def main() -> int:
    grpc = "--grpc" in sys.argv[1:]
    started = time.monotonic()
    print(f"# qdrant-client {getattr(qdrant_client, '__version__', None) or _dist_version()} on Python {sys.version.split()[0]}, over {'gRPC (prefer_grpc=True)' if grpc else 'REST'}")
    server = Server(grpc)
    try:
        try:
            server.wait_ready()
        except Exception as err:  # noqa: BLE001
            results.append(False)
            print("not ok 1 - start bin/quiver")
            for line in str(err).splitlines():
                print(f"#   {line}")
        else:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                version_check_is_real(caught)
                _before_client.update(threading.enumerate())
                if grpc:
                    client = QdrantClient(url=server.url, grpc_port=server.grpc_port, prefer_grpc=True, timeout=30)
                else:
                    client = QdrantClient(url=server.url, timeout=30)
                try:
                    workflow(client, server.url, grpc)
                finally:
                    client.close()

                @step("the client raised no warning (version check included) during the workflow")
                def _():
                    join_checks()
                    eq([f"{w.category.__name__}: {w.message}" for w in caught], [], "warnings")
    finally:
        server.stop()
    passed = sum(results)
    failed = len(results) - passed
    print(f"1..{len(results)}")
    print(f"# pass {passed}")
    print(f"# fail {failed}")
    print(f"# {time.monotonic() - started:.1f} s")
    return 0 if failed == 0 else 1


def _dist_version() -> str:
    try:
        from importlib.metadata import version

        return version("qdrant-client")
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    sys.exit(main())
