#!/usr/bin/env python3
"""Property-based fuzzing of every route of the reference's OpenAPI document (v1.18)
against a real bin/quiver holding real data.

Set-up: starts bin/quiver on a free port of 127.0.0.1 (storage in a temporary folder;
build first with `npx tsc -p tsconfig.json`), creates two populated target collections
(`fuzz`: an unnamed 4-dim Cosine vector; `fuzz_named`: two named 4-dim vectors with int8
quantization and an HNSW index), 305 points each with payloads and four payload indexes,
one snapshot of each, and a `sentinel` collection that no generated request names.

Generation: for each of the document's 75 operations, schemathesis (3.39, used as a
library) builds a case strategy from the operation's schema, and hypothesis runs it with
a fixed seed for FUZZ_EXAMPLES examples. Each example is sent twice:

  * as generated, with the collection path parameter pointed at `fuzz` and `fuzz_named`
    for 8 examples in 10 (`fuzz_scratch`, which does not exist, or the generated name for
    the rest), ids, field names, shard ids and snapshot names pointed at real ones most of
    the time, the request fields Quiver reads (limit, filter, query, payload, params, ...)
    filled half of the time from field-aware strategies that mix valid values with edge
    values (0, -1, 2^32, 2^53, 1e12, 1e300), and vectors and `using` made to fit the
    target most of the time;
  * mutated once: a number (a counting field by preference) set to an edge value, a value
    nested past the reference's JSON recursion limit (127 levels) in a way that keeps it
    valid where it stands (filters in filters, payload values in arrays), a value replaced
    by junk, a key dropped or added, the body replaced by malformed JSON or a deeply
    nested document, a query parameter or a path parameter replaced by junk.

Then a boundary sweep (boundary_sweep): the accepted requests with the most fields are
sent again with each counting field at each of a few out-of-range values, and with their
filters and payloads nested 128 and 20,000 levels deep. A request already sent in the
operation is not sent again.

The schemas are prepared first (prepared_spec): component references are inlined at most
three levels deep and never into themselves (the filter schemas are recursive, and
hypothesis-jsonschema neither resolves recursive references nor generates the fully
inlined schemas in reasonable time), and bare `{"nullable": true}` branches mean null.
Hypothesis's mutator, which copies parts of one example into the next, is switched off:
on these strategies it mostly repeated earlier requests.

Properties checked:
  * no answer is a 5xx (nor a closed connection), except 501 from the routes Quiver lists
    as not implemented (ts/api/rest/not-implemented.ts, also listed in README.md);
  * a refused (4xx) request to a route that writes changes nothing: the points (ids,
    payloads, vectors), the configuration, payload indexes and aliases of the target it
    names (both targets when it names none), and the node's collection and alias lists are
    hashed before and after it;
  * at the end the node is healthy (/healthz), the sentinel collection's scroll output
    is byte-for-byte what it was, and the server log holds no unhandled error.

Valid writes may change the targets: each operation starts from restored targets (the
seed points, payloads and indexes put back, extra points deleted, a deleted or re-created
collection created again).

Routes excluded: none. Snapshot recovery from remote URLs is turned off for the run
(service.enable_snapshot_url_recovery: false, so a generated http:// location is a 403
and nothing leaves the machine); file:// recoveries and uploads of the targets' own
snapshots are generated and run.

Determinism: the generated cases are fixed by the seed; what is drawn from the node's
state (snapshot names, which carry a time) can differ, so two runs send nearly, not
exactly, the same requests.

Output: TAP, one line per operation (`ok N - POST /collections/{collection_name}/points/query`)
with the failing requests (method, path, body, status, response) as `#` lines, then one
line per end-of-run property, the plan, and a summary (seed, operations covered, requests
sent, server errors, time). Exits non-zero when a line failed.

Knobs: FUZZ_SEED (default 20261126), FUZZ_EXAMPLES (examples per operation, default 25),
FUZZ_OPS (a substring: only operations whose "METHOD /path" contains it), FUZZ_VERBOSE=1
(every request and its answer on stderr), FUZZ_KEEP=1 (keep the server's folder),
QUIVER_ROOT (the checkout whose bin/quiver runs; default this one).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
import traceback
import urllib.parse
import uuid

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUIVER_ROOT = os.environ.get("QUIVER_ROOT", REPO_ROOT)


def spec_path() -> str:
    """As test/support/openapi.ts finds it: $QUIVER_REFERENCE_DIR, ../shared/reference, /work/shared/reference."""
    dirs = [d for d in (os.environ.get("QUIVER_REFERENCE_DIR"), os.path.join(os.path.dirname(REPO_ROOT), "shared", "reference"), "/work/shared/reference") if d]
    files = [os.path.join(d, "qdrant-openapi-v1.18.json") for d in dirs]
    return next((f for f in files if os.path.exists(f)), files[0])


SPEC = spec_path()
PINS = "schemathesis==3.39.16 'hypothesis<6.116'"
SEED = int(os.environ.get("FUZZ_SEED", "20261126"))
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
ONLY = os.environ.get("FUZZ_OPS", "")
VERBOSE = os.environ.get("FUZZ_VERBOSE", "") not in ("", "0")

sys.path.insert(0, os.path.join(REPO_ROOT, "test", "support"))
from quiver_server import Server as QuiverServer, exit_missing  # noqa: E402

try:
    import requests
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st
    from schemathesis.types import NotSet
    import hypothesis.internal.conjecture.engine as hypothesis_engine
except ImportError as err:  # pragma: no cover - the message is the point
    exit_missing("schemathesis and hypothesis", err, f"scripts/setup.sh test installs them: {sys.executable} -m pip install {PINS}")

# Hypothesis spends a large share of a small example budget on "mutations" that copy
# parts of an earlier example into the next one; on these case strategies that mostly
# repeats the same request (16 distinct requests of 40 for the query route). With a few
# examples per operation, distinct requests are worth more: the pinned version's mutator
# is switched off (when it is where this version keeps it), and repeats are not sent.
if hasattr(hypothesis_engine, "ConjectureRunner") and hasattr(hypothesis_engine.ConjectureRunner, "generate_mutations_from"):
    hypothesis_engine.ConjectureRunner.generate_mutations_from = lambda self, data: None

TARGETS = ("fuzz", "fuzz_named")
SCRATCH = "fuzz_scratch"
SENTINEL = "sentinel"
DIM = 4
SEED_POINTS = 300
UUID_IDS = [str(uuid.UUID(int=0x5EED0000 + i)) for i in range(5)]
FIELDS = ["color", "price", "count", "tags", "nested.a", "nested[].b", "date", "geo", "text", "missing"]
VECTOR_NAMES = ["", "image", "text", "missing"]
COLORS = ["red", "green", "blue", "black"]


# -- the server -------------------------------------------------------------------------------------

class Server(QuiverServer):
    """The node under test: remote snapshot URLs are off, so no generated location leaves the machine."""

    def __init__(self) -> None:
        super().__init__(prefix="quiver-fuzz-", env={"SERVICE__SERVICE__ENABLE_SNAPSHOT_URL_RECOVERY": "false"}, root=QUIVER_ROOT)
        self.wait_ready(30)

    def stop(self, keep: bool = False) -> None:
        keep = keep or bool(os.environ.get("FUZZ_KEEP"))
        super().stop(keep)
        if keep:
            print(f"# FUZZ_KEEP: the server's folder (log, storage) is kept in {self.dir}")


# -- the data ---------------------------------------------------------------------------------------

def seed_vector(i: int, k: int = 0) -> list:
    return [round(((i * 7 + j * 3 + k * 5) % 17) / 17 - 0.4, 4) for j in range(DIM)]


def seed_payload(i: int) -> dict:
    return {
        "color": COLORS[i % len(COLORS)],
        "price": round(i * 1.25, 2),
        "count": i % 13,
        "tags": [f"t{i % 5}", f"t{i % 3}"],
        "nested": [{"a": i % 4, "b": f"x{i % 6}"}],
        "date": f"2024-0{1 + i % 9}-1{i % 10}T00:00:00Z",
        "geo": {"lat": (i % 90) - 45.0, "lon": (i % 180) - 90.0},
        "text": f"the quick brown fox {i}",
    }


def seed_points(name: str, n: int) -> list:
    ids = list(range(n)) + UUID_IDS
    points = []
    for k, pid in enumerate(ids):
        vec = seed_vector(k) if name != "fuzz_named" else {"image": seed_vector(k), "text": seed_vector(k, 1)}
        points.append({"id": pid, "vector": vec, "payload": seed_payload(k)})
    return points


COLLECTIONS = {
    "fuzz": {"vectors": {"size": DIM, "distance": "Cosine"}},
    "fuzz_named": {
        "vectors": {"image": {"size": DIM, "distance": "Dot"}, "text": {"size": DIM, "distance": "Euclid"}},
        "quantization_config": {"scalar": {"type": "int8"}},
        "optimizers_config": {"indexing_threshold": 1},
    },
    SENTINEL: {"vectors": {"size": DIM, "distance": "Dot"}},
}
INDEXES = [("color", "keyword"), ("price", "float"), ("count", "integer"), ("date", "datetime")]


class Node:
    """The running node as the fuzzer sees it: set-up, restoring the targets, state hashes."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.http = requests.Session()
        self.snapshot_names: dict = {}

    def call(self, method: str, path: str, body=None, params=None, timeout: float = 60):
        return self.http.request(method, self.server.url + path, json=body, params=params, timeout=timeout)

    def must(self, method: str, path: str, body=None, params=None):
        r = self.call(method, path, body, params)
        if r.status_code != 200:
            raise RuntimeError(f"set-up {method} {path}: {r.status_code} {r.text[:300]}")
        return r.json().get("result")

    def create(self, name: str) -> None:
        self.must("PUT", f"/collections/{name}", COLLECTIONS[name])
        n = SEED_POINTS if name != SENTINEL else 50
        self.must("PUT", f"/collections/{name}/points", {"points": seed_points(name, n)}, {"wait": "true"})
        for field, schema in INDEXES:
            self.must("PUT", f"/collections/{name}/index", {"field_name": field, "field_schema": schema}, {"wait": "true"})

    def restore(self, name: str) -> None:
        """Puts a target back as created: its vectors, seed points, payloads and indexes."""
        r = self.call("GET", f"/collections/{name}")
        if r.status_code == 200 and r.json()["result"]["config"]["params"].get("vectors") != COLLECTIONS[name]["vectors"]:
            self.must("DELETE", f"/collections/{name}")
            r = self.call("GET", f"/collections/{name}")
        if r.status_code == 404:
            self.create(name)
            return
        keep = list(range(SEED_POINTS)) + UUID_IDS
        self.must("POST", f"/collections/{name}/points/delete", {"filter": {"must_not": [{"has_id": keep}]}}, {"wait": "true"})
        self.must("PUT", f"/collections/{name}/points", {"points": seed_points(name, SEED_POINTS)}, {"wait": "true"})
        schema = r.json()["result"].get("payload_schema", {})
        for field, kind in INDEXES:
            if schema.get(field, {}).get("data_type") != kind:
                if field in schema:
                    self.must("DELETE", f"/collections/{name}/index/{field}", params={"wait": "true"})
                self.must("PUT", f"/collections/{name}/index", {"field_name": field, "field_schema": kind}, {"wait": "true"})

    def refresh_snapshots(self) -> None:
        for name in TARGETS:
            r = self.call("GET", f"/collections/{name}/snapshots")
            self.snapshot_names[name] = [s["name"] for s in r.json().get("result", [])] if r.status_code == 200 else []

    def collection_state(self, name: str):
        r = self.call("GET", f"/collections/{name}")
        if r.status_code == 404:
            return "missing"
        info = r.json()["result"]
        config = info["config"]
        schema = {k: {"data_type": v.get("data_type"), "params": v.get("params")} for k, v in info.get("payload_schema", {}).items()}
        pts = self.call("POST", f"/collections/{name}/points/scroll", {"limit": 100000, "with_payload": True, "with_vector": True}).json()["result"]["points"]
        aliases = self.call("GET", f"/collections/{name}/aliases").json().get("result")
        return {"config": config, "payload_schema": schema, "points": pts, "aliases": aliases}

    def state(self, names) -> str:
        """A hash of what a write could change, over the named collections."""
        everything = {
            "collections": sorted(c["name"] for c in self.call("GET", "/collections").json()["result"]["collections"]),
            "aliases": sorted(json.dumps(a, sort_keys=True) for a in self.call("GET", "/aliases").json()["result"]["aliases"]),
        }
        for name in names:
            everything[name] = self.collection_state(name)
        return hashlib.sha256(json.dumps(everything, sort_keys=True).encode()).hexdigest()

    def sentinel_checksum(self) -> str:
        r = self.call("POST", f"/collections/{SENTINEL}/points/scroll", {"limit": 1000, "with_payload": True, "with_vector": True})
        return hashlib.sha256(r.content.split(b',"time"')[0]).hexdigest() if r.status_code == 200 else f"status {r.status_code}"


# -- the document --------------------------------------------------------------------------------------

PREFIX = "#/components/schemas/"
REF_DEPTH = 3


def prepared_spec() -> dict:
    """The v1.18 document with each operation's request schemas inlined (component
    references followed at most REF_DEPTH levels and never into themselves: the filter
    schemas are recursive, and hypothesis-jsonschema neither resolves recursive
    references nor generates the fully inlined schemas in reasonable time), and the
    bare `{"nullable": true}` branches read as null (otherwise they generate any JSON)."""
    with open(SPEC) as f:
        raw = json.load(f)
    comps = raw["components"]["schemas"]

    def inline(node, depth, stack):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(PREFIX):
                name = ref[len(PREFIX):]
                if name in stack or depth >= REF_DEPTH:
                    return {}
                return inline(comps[name], depth + 1, stack + (name,))
            if node == {"nullable": True}:
                return {"enum": [None]}
            return {k: inline(v, depth, stack) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v, depth, stack) for v in node]
        return node

    for ops in raw["paths"].values():
        for op in ops.values():
            if not isinstance(op, dict):
                continue
            for content in op.get("requestBody", {}).get("content", {}).values():
                content["schema"] = inline(content["schema"], 0, ())
            for p in op.get("parameters", []):
                if "schema" in p:
                    p["schema"] = inline(p["schema"], 0, ())
    raw["components"]["securitySchemes"] = {}
    raw.pop("security", None)
    for ops in raw["paths"].values():
        for op in ops.values():
            if isinstance(op, dict):
                op.pop("security", None)
    return raw


def body_properties(schema, out=None) -> set:
    """Top-level property names of a body schema, through anyOf/oneOf/allOf."""
    out = set() if out is None else out
    if isinstance(schema, dict):
        out.update((schema.get("properties") or {}).keys())
        for k in ("anyOf", "oneOf", "allOf"):
            for s in schema.get(k, []):
                body_properties(s, out)
    return out


def not_implemented() -> set:
    # Routes that answer 501 (NOT_IMPLEMENTED_ROUTES), and those served with some operations
    # that answer 501 (PARTLY_IMPLEMENTED_ROUTES): both lists are in that file.
    with open(os.path.join(REPO_ROOT, "ts", "api", "rest", "not-implemented.ts")) as f:
        text = f.read()
    return {(m, p) for m, p in re.findall(r"\['(GET|PUT|POST|PATCH|DELETE)', '([^']+)'\]", text)}


# POST routes that only read: retrieve (POST /points), scroll, count, similarity and facet.
READ_POSTS = re.compile(r"/points(/scroll|/count|/(search|recommend|discover|query)(/batch|/groups|/matrix/pairs|/matrix/offsets)?)?$|/facet$")


def writes(method: str, path: str) -> bool:
    return method != "GET" and not (method == "POST" and READ_POSTS.search(path))


# -- values ----------------------------------------------------------------------------------------

EDGE_INTS = [0, 1, 2, 10, -1, 2**31 - 1, 2**32 - 1, 2**32, 2**40, 10**12, 2**53 - 1, 2**53 + 1, 2**63, 2**64, 10**30]
# Fields that count things (and so may reach the engine as k, ef or a candidate count).
COUNT_FIELDS = {"limit", "offset", "hnsw_ef", "oversampling", "ef", "m", "ef_construct", "full_scan_threshold", "size", "min_count",
                "shard_number", "replication_factor", "write_consistency_factor", "indexing_threshold", "max_indexing_threads", "payload_m",
                "gt", "gte", "lt", "lte", "radius", "score_threshold", "quantile", "max_segment_size", "flush_interval_sec", "wal_capacity_mb"}
EDGE_FLOATS = [0.0, -0.0, 0.5, 1.0, 1.5, -1.5, 1e12, 1e300, -1e300, 4294967295.0, 4294967296.0, 1e-300]
DEEP_DEPTHS = [126, 127, 128, 1000, 20000, 200000]


class Deep:
    """`inner` wrapped `depth` times, written as text (Python's json cannot nest that deep).
    The wrappers keep what they wrap valid where it stands: `must` nests a filter in a
    filter, `array` nests a payload value in arrays, `object` in objects."""

    WRAPPERS = {"array": ("[", "]"), "object": ('{"a":', "}"), "must": ('{"must":', "}")}

    def __init__(self, wrapper: str, depth: int, inner=None) -> None:
        self.wrapper, self.depth, self.inner = wrapper, depth, inner
        self.token = f"@@deep-{wrapper}-{depth}-{id(self)}@@"

    def text(self) -> str:
        open_, close = self.WRAPPERS[self.wrapper]
        inner = {"array": [], "object": 1, "must": {}}[self.wrapper] if self.inner is None else self.inner
        return open_ * self.depth + json_text(inner) + close * self.depth


def json_text(value) -> str:
    """JSON text of a value that may hold Deep values and bytes (as latin-1 text)."""
    deep = []

    def enc(x):
        if isinstance(x, Deep):
            deep.append(x)
            return x.token
        if isinstance(x, dict):
            return {str(k): enc(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [enc(v) for v in x]
        if isinstance(x, bytes):
            return x.decode("latin-1")
        return x

    text = json.dumps(enc(value))
    for d in deep:
        text = text.replace(json.dumps(d.token), d.text(), 1)
    return text

    def __repr__(self) -> str:
        return f"<{self.wrapper} nested {self.depth} deep>"


def counts():
    return st.one_of(st.integers(0, 20), st.sampled_from(EDGE_INTS), st.integers())


def numbers():
    return st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(EDGE_FLOATS), st.integers(-5, 5))


def texts():
    return st.one_of(st.sampled_from(["", " ", "a", "..", "%", "a/b", "\u0000", "\ud83d\ude00", "x" * 300, "-1", "1e12", "null"]), st.text(max_size=12))


def scalars():
    return st.one_of(st.none(), st.booleans(), counts(), numbers(), texts())


def junk():
    deep = st.builds(Deep, st.sampled_from(sorted(Deep.WRAPPERS)), st.sampled_from(DEEP_DEPTHS))
    small = st.recursive(scalars(), lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts(), inner, max_size=3)), max_leaves=6)
    return st.one_of(scalars(), small, deep)


def vector():
    v = st.lists(st.floats(-2, 2, allow_nan=False, width=32), min_size=DIM, max_size=DIM)
    return st.one_of(v, v, st.lists(numbers(), max_size=6))


def point_id():
    return st.one_of(st.integers(0, SEED_POINTS + 20), st.sampled_from(UUID_IDS), st.sampled_from([-1, 2**53, 2**64, 1.5, "not-a-uuid", ""]))


def named_vectors():
    return st.dictionaries(st.sampled_from(["image", "text", "missing", ""]), vector(), min_size=1, max_size=2)


def vector_input():
    return st.one_of(vector(), vector(), named_vectors())


def key():
    return st.one_of(st.sampled_from(FIELDS), texts())


def condition(inner):
    match = st.one_of(
        st.builds(lambda v: {"value": v}, st.one_of(st.sampled_from(COLORS), st.integers(-3, 15), st.booleans(), scalars())),
        st.builds(lambda v: {"any": v}, st.lists(st.one_of(st.sampled_from(COLORS), st.integers(0, 15)), max_size=3)),
        st.builds(lambda v: {"except": v}, st.lists(st.sampled_from(COLORS), max_size=3)),
        st.builds(lambda v: {"text": v}, st.sampled_from(["fox", "quick brown", ""])),
    )
    rng = st.fixed_dictionaries({}, optional={"gt": numbers(), "gte": numbers(), "lt": numbers(), "lte": st.one_of(numbers(), st.sampled_from(["2024-05-01T00:00:00Z", "bad"]))})
    field = st.one_of(
        st.fixed_dictionaries({"key": key(), "match": match}),
        st.fixed_dictionaries({"key": key(), "range": rng}),
        st.fixed_dictionaries({"key": key(), "values_count": st.fixed_dictionaries({}, optional={"gt": counts(), "lte": counts()})}),
        st.fixed_dictionaries({"key": st.just("geo"), "geo_radius": st.fixed_dictionaries({"center": st.fixed_dictionaries({"lat": numbers(), "lon": numbers()}), "radius": numbers()})}),
        st.builds(lambda k: {"is_empty": {"key": k}}, key()),
        st.builds(lambda k: {"is_null": {"key": k}}, key()),
        st.builds(lambda ids: {"has_id": ids}, st.lists(point_id(), max_size=4)),
        st.builds(lambda n: {"has_vector": n}, st.sampled_from(VECTOR_NAMES)),
    )
    nested = st.builds(lambda k, f: {"nested": {"key": k, "filter": f}}, st.sampled_from(["nested", "tags"]), inner)
    return st.one_of(field, field, nested, inner)


def filters():
    def extend(inner):
        clause = st.one_of(st.lists(condition(inner), max_size=3), condition(inner))
        return st.fixed_dictionaries({}, optional={"must": clause, "should": clause, "must_not": clause,
                                                    "min_should": st.fixed_dictionaries({"conditions": st.lists(condition(inner), max_size=2), "min_count": counts()})})
    return st.recursive(st.just({}), extend, max_leaves=4)


def payloads():
    value = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10, 10), numbers(), st.sampled_from(COLORS), st.text(max_size=8)),
                         lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "color", "price"]), inner, max_size=3)), max_leaves=6)
    return st.dictionaries(st.one_of(st.sampled_from(["color", "price", "count", "tags", "nested", "new"]), st.text(max_size=6)), value, max_size=4)


def with_selector():
    return st.one_of(st.booleans(), st.lists(st.sampled_from(FIELDS + VECTOR_NAMES), max_size=2), st.builds(lambda k: {"include": k}, st.lists(st.sampled_from(FIELDS), max_size=2)))


def search_params():
    return st.fixed_dictionaries({}, optional={
        "hnsw_ef": counts(), "exact": st.booleans(),
        "quantization": st.fixed_dictionaries({}, optional={"oversampling": st.one_of(numbers(), counts()), "rescore": st.booleans(), "ignore": st.booleans()}),
    })


def query_value():
    rec = st.fixed_dictionaries({"positive": st.lists(st.one_of(point_id(), vector()), max_size=3)}, optional={"negative": st.lists(st.one_of(point_id(), vector()), max_size=2), "strategy": st.sampled_from(["average_vector", "best_score"])})
    return st.one_of(vector(), point_id(), st.builds(lambda q: {"nearest": q}, st.one_of(vector(), point_id())),
                     st.builds(lambda r: {"recommend": r}, rec), st.builds(lambda k: {"order_by": k}, key()), st.none())


def order_by():
    return st.one_of(key(), st.fixed_dictionaries({"key": key()}, optional={"direction": st.sampled_from(["asc", "desc", "up"]), "start_from": st.one_of(numbers(), st.just("2024-01-01T00:00:00Z"))}))


def points_value():
    point = st.fixed_dictionaries({"id": point_id(), "vector": vector_input()}, optional={"payload": st.one_of(payloads(), st.none())})
    return st.one_of(st.lists(point_id(), max_size=5), st.lists(point, max_size=4))


def similarity_request():
    return st.fixed_dictionaries({}, optional={
        "query": query_value(), "vector": vector_input(), "positive": st.lists(point_id(), max_size=2), "limit": counts(), "offset": counts(),
        "filter": filters(), "params": search_params(), "using": st.sampled_from(VECTOR_NAMES), "with_payload": with_selector(),
    })


def collection_names():
    return st.one_of(st.sampled_from(TARGETS), st.just(SCRATCH), texts())


def alias_actions():
    alias = st.sampled_from(["fuzz_alias", "fuzz_alias2", ""])
    action = st.one_of(
        st.builds(lambda c, a: {"create_alias": {"collection_name": c, "alias_name": a}}, collection_names(), alias),
        st.builds(lambda a: {"delete_alias": {"alias_name": a}}, alias),
        st.builds(lambda a, b: {"rename_alias": {"old_alias_name": a, "new_alias_name": b}}, alias, alias),
    )
    return st.lists(action, max_size=3)


def batch_operations():
    sel = st.fixed_dictionaries({}, optional={"points": st.lists(point_id(), max_size=3), "filter": filters()})
    op = st.one_of(
        st.builds(lambda p: {"upsert": {"points": p}}, points_value()),
        st.builds(lambda s: {"delete": s}, sel),
        st.builds(lambda s, p: {"set_payload": {**s, "payload": p}}, sel, payloads()),
        st.builds(lambda s, p: {"overwrite_payload": {**s, "payload": p}}, sel, payloads()),
        st.builds(lambda s, k: {"delete_payload": {**s, "keys": k}}, sel, st.lists(key(), max_size=2)),
        st.builds(lambda s: {"clear_payload": s}, sel),
        st.builds(lambda p: {"update_vectors": {"points": p}}, st.lists(st.fixed_dictionaries({"id": point_id(), "vector": vector_input()}), max_size=2)),
        st.builds(lambda s, n: {"delete_vectors": {**s, "vector": n}}, sel, st.lists(st.sampled_from(VECTOR_NAMES), max_size=2)),
    )
    return st.lists(op, max_size=3)


def hnsw_config():
    return st.fixed_dictionaries({}, optional={"m": counts(), "ef_construct": counts(), "full_scan_threshold": counts(), "max_indexing_threads": counts(), "payload_m": counts(), "on_disk": st.booleans()})


def collection_vectors():
    one = st.fixed_dictionaries({"size": counts(), "distance": st.sampled_from(["Cosine", "Dot", "Euclid", "Manhattan", "Hamming"])}, optional={"hnsw_config": hnsw_config()})
    return st.one_of(one, st.dictionaries(st.sampled_from(["image", "text", "a/b", ""]), one, max_size=2))


# The fields Quiver reads, by name, wherever an operation's schema has them at the top level.
FIELD_VALUES = {
    "limit": counts(), "offset": st.one_of(counts(), point_id()), "filter": filters(), "params": search_params(),
    "query": query_value(), "vector": st.one_of(vector_input(), st.builds(lambda n, v: {"name": n, "vector": v}, st.sampled_from(VECTOR_NAMES), vector()), st.lists(st.sampled_from(VECTOR_NAMES), max_size=2)),
    "positive": st.lists(st.one_of(point_id(), vector()), max_size=3), "negative": st.lists(st.one_of(point_id(), vector()), max_size=2),
    "points": points_value(), "ids": st.lists(point_id(), max_size=5), "payload": payloads(), "keys": st.lists(key(), max_size=3),
    "key": key(), "with_payload": with_selector(), "with_vector": with_selector(), "score_threshold": numbers(),
    "using": st.sampled_from(VECTOR_NAMES), "order_by": order_by(), "exact": st.booleans(),
    "searches": st.lists(similarity_request(), max_size=3), "operations": batch_operations(),
    "batch": st.fixed_dictionaries({"ids": st.lists(point_id(), max_size=3), "vectors": st.one_of(st.lists(vector(), max_size=3), st.dictionaries(st.sampled_from(["image", "text"]), st.lists(vector(), max_size=3), max_size=2))}, optional={"payloads": st.lists(st.one_of(payloads(), st.none()), max_size=3)}),
    "vectors": collection_vectors(), "hnsw_config": hnsw_config(),
    "optimizers_config": st.fixed_dictionaries({}, optional={"indexing_threshold": counts(), "deleted_threshold": numbers(), "vacuum_min_vector_number": counts(), "flush_interval_sec": counts(), "max_segment_size": counts()}),
    "wal_config": st.fixed_dictionaries({}, optional={"wal_capacity_mb": counts(), "wal_segments_ahead": counts()}),
    "quantization_config": st.one_of(st.none(), st.just({"scalar": {"type": "int8"}}), st.builds(lambda q: {"scalar": {"type": "int8", "quantile": q}}, numbers()), st.just({"binary": {}}), st.just({"product": {"compression": "x4"}})),
    "shard_number": counts(), "replication_factor": counts(), "write_consistency_factor": counts(),
    "field_name": key(), "field_schema": st.one_of(st.sampled_from(["keyword", "integer", "float", "bool", "geo", "text", "datetime", "uuid", "nope"]), st.fixed_dictionaries({"type": st.sampled_from(["text", "integer", "keyword"])}, optional={"min_token_len": counts(), "max_token_len": counts(), "lookup": st.booleans(), "range": st.booleans()})),
    "actions": alias_actions(), "priority": st.sampled_from(["snapshot", "replica", "no_sync", "other"]), "checksum": st.one_of(texts(), st.just("0" * 64)),
}


# -- requests -----------------------------------------------------------------------------------------

class Req:
    def __init__(self, method, template, path_params, query, body, multipart):
        self.method, self.template = method, template
        self.path_params, self.query, self.body, self.multipart = path_params, query, body, multipart
        self.raw = None  # bytes sent instead of `body` when set

    def copy(self) -> "Req":
        r = Req(self.method, self.template, dict(self.path_params), dict(self.query), json_copy(self.body), self.multipart)
        r.raw = self.raw
        return r

    def path(self) -> str:
        out = self.template
        for k, v in self.path_params.items():
            out = out.replace("{" + k + "}", urllib.parse.quote(str(v), safe="", errors="surrogatepass"))
        return out

    def query_string(self) -> str:
        return urllib.parse.urlencode(self.query, doseq=True, errors="surrogatepass")

    def url(self) -> str:
        q = self.query_string()
        return self.path() + ("?" + q if q else "")

    def collections(self):
        """The target collections this request names (both when it names none)."""
        name = self.path_params.get("collection_name")
        if name is None:
            return list(TARGETS)
        return [name] if name in TARGETS else []

    def body_bytes(self):
        if self.raw is not None:
            return self.raw
        if self.body is NOT_SENT:
            return None
        return json_text(self.body).encode("utf-8", "surrogatepass")

    def fingerprint(self) -> str:
        body = self.body_bytes() or b""
        return f"{self.method} {self.url()} {self.multipart} {hashlib.sha256(body).hexdigest()}"

    def describe(self) -> str:
        body = self.body_bytes()
        shown = "" if body is None else body[:600].decode("utf-8", "replace") + (f"... ({len(body)} bytes)" if len(body) > 600 else "")
        return f"{self.method} {self.url()} body: {shown}"


NOT_SENT = object()


def json_copy(x):
    if x is NOT_SENT or isinstance(x, Deep):
        return x
    if isinstance(x, dict):
        return {k: json_copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [json_copy(v) for v in x]
    return x


def query_value_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return [query_value_text(x) for x in v]
    return str(v)


def from_case(case, op) -> Req:
    body = NOT_SENT if isinstance(case.body, NotSet) else case.body
    query = {k: query_value_text(v) for k, v in (case.query or {}).items() if v is not None}
    multipart = (case.media_type or "").startswith("multipart/")
    # schemathesis keeps path parameters percent-encoded; Req.path() encodes them once.
    path_params = {k: urllib.parse.unquote(v) if isinstance(v, str) else v for k, v in (case.path_parameters or {}).items()}
    return Req(op.method.upper(), op.path, path_params, query, body, multipart)


def point_at_targets(req: Req, draw, node: Node, index: int) -> None:
    """Most of the time, path parameters name real things: a target, its points, fields,
    snapshots. Which collection goes by the example's index (the `index % 10`th of
    fuzz, fuzz_named, ... fuzz_scratch, as generated), so that every operation meets
    both targets whatever hypothesis draws first; it draws nothing, so the draws of an
    example do not depend on its index (hypothesis replays examples and checks that)."""
    pp = req.path_params
    if "collection_name" in pp:
        slot = index % 10
        if slot < 8:
            pp["collection_name"] = TARGETS[slot % 2]
        elif slot == 8:
            pp["collection_name"] = SCRATCH
    if pp.get("collection_name") == SENTINEL:
        pp["collection_name"] = TARGETS[0]
    if "id" in pp and draw(st.integers(0, 9)) < 6:
        pp["id"] = draw(st.one_of(st.integers(0, SEED_POINTS + 5), st.sampled_from(UUID_IDS)))
    if "field_name" in pp and draw(st.integers(0, 9)) < 6:
        pp["field_name"] = draw(st.sampled_from(FIELDS))
    if "shard_id" in pp and draw(st.integers(0, 9)) < 6:
        pp["shard_id"] = 0
    if "vector_name" in pp and draw(st.integers(0, 9)) < 6:
        pp["vector_name"] = draw(st.sampled_from(VECTOR_NAMES[1:]))
    if "snapshot_name" in pp and draw(st.integers(0, 9)) < 6:
        names = node.snapshot_names.get(pp.get("collection_name"), []) or [n for ns in node.snapshot_names.values() for n in ns]
        if names:
            pp["snapshot_name"] = draw(st.sampled_from(names))


def fill_fields(req: Req, draw, props: set, node: Node) -> None:
    """Fields Quiver reads get field-aware values (valid ones and edge values) half of the time."""
    if req.body is NOT_SENT and not props:
        return
    if req.multipart:
        choice = draw(st.integers(0, 3))
        files = [os.path.join(node.server.snapshots, c, n) for c, ns in node.snapshot_names.items() for n in ns]
        if choice == 0 and files:
            with open(draw(st.sampled_from(sorted(files))), "rb") as f:
                req.body = {"snapshot": f.read()}
        elif choice == 1:
            req.body = {"snapshot": draw(st.binary(max_size=64))}
        return
    if not isinstance(req.body, dict):
        if draw(st.booleans()):
            req.body = {}
        else:
            return
    for name in sorted(props & FIELD_VALUES.keys()):
        if draw(st.booleans()):
            req.body[name] = draw(FIELD_VALUES[name])
    if "location" in props and draw(st.booleans()):
        files = [f"file://{os.path.join(node.server.snapshots, c, n)}" for c, ns in node.snapshot_names.items() for n in ns]
        req.body["location"] = draw(st.sampled_from(sorted(files) + ["file:///etc/passwd", "http://127.0.0.1:9/x.snapshot", "s3://bucket/x", "nope", ""]))


RAW_BODIES = [b"", b"{", b"not json", b'{"a": 1,}', b"null", b"[]", b'"text"', b"1", b"\xff\xfe\xfd", b'{"limit": 1e999}', b'{"a":' + b"1" * 400 + b"}",
              b'{"filter":{"must":[{"key":"color","match":{"value":"red"}}]}}\x00']


VALID_USING = {"fuzz": [""], "fuzz_named": ["image", "text"]}


def realize(req: Req, draw) -> None:
    """Most of the time, vectors and `using` fit the target collection the request names,
    so that valid requests get past the vector checks to the data and the engine."""
    target = req.path_params.get("collection_name")
    if target not in TARGETS or not isinstance(req.body, dict) or draw(st.integers(0, 9)) >= 7:
        return
    named = target == "fuzz_named"
    for node in containers(req.body, []):
        if not isinstance(node, dict):
            continue
        similarity = any(k in node for k in ("query", "positive")) or ("vector" in node and "id" not in node)
        if "using" in node or (named and similarity):
            node["using"] = draw(st.sampled_from(VALID_USING[target]))
        if not named:
            continue
        v = node.get("vector")
        if isinstance(v, list) and all(isinstance(x, (int, float)) for x in v):
            node["vector"] = {"image": v, "text": v} if "id" in node else {"name": node["using"] if "using" in node and node["using"] else "image", "vector": v}
        vs = node.get("vectors")
        if "ids" in node and isinstance(vs, list):
            node["vectors"] = {"image": vs, "text": vs}


FILTER_KEYS = {"filter", "must", "should", "must_not"}
MUTATIONS = ["edge_number", "edge_number", "wrap_deep", "wrap_deep", "replace", "replace", "drop", "add", "raw", "raw_deep", "query", "path"]


def containers(node, out, depth=0):
    """Every dict and list in a body (not below 12 levels), with the body itself."""
    out.append(node)
    if depth < 12:
        for v in (node.values() if isinstance(node, dict) else node):
            if isinstance(v, (dict, list)):
                containers(v, out, depth + 1)
    return out


def mutate(req: Req, draw) -> Req:
    """One change that makes a request wrong, or right in an unusual way (see the module docstring)."""
    out = req.copy()
    kind = draw(st.sampled_from(MUTATIONS))
    body = out.body
    if kind not in ("raw", "raw_deep", "query", "path") and not isinstance(body, (dict, list)):
        kind = "raw" if not out.multipart else "query"
    if kind == "edge_number":
        # A number of the request (limit, offset, hnsw_ef, oversampling, an id...) at an edge.
        slots = [(n, k) for n in containers(body, []) for k in (n.keys() if isinstance(n, dict) else range(len(n)))
                 if isinstance(n[k], (int, float)) and not isinstance(n[k], bool)]
        counted = [(n, k) for n, k in slots if k in COUNT_FIELDS]
        if slots:
            node, k = draw(st.sampled_from(counted if counted and draw(st.integers(0, 3)) > 0 else slots))
            node[k] = draw(st.one_of(st.sampled_from(EDGE_INTS), st.sampled_from(EDGE_FLOATS)))
            return out
        kind = "replace"
    if kind in ("wrap_deep", "replace", "drop", "add"):
        node = draw(st.sampled_from(containers(body, [])))
        keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
        if kind == "wrap_deep":
            # What stands at a key, nested past the limit in a way that keeps it valid there.
            if not keys:
                node_key = "filter" if isinstance(node, dict) else None
                inner = {}
            else:
                node_key = draw(st.sampled_from(keys))
                inner = node[node_key]
            wrapper = "must" if node_key in FILTER_KEYS else draw(st.sampled_from(["array", "object"]))
            value = Deep(wrapper, draw(st.sampled_from(DEEP_DEPTHS)), json_copy(inner) if not isinstance(inner, Deep) else None)
            if node_key is None:
                node.append(value)
            else:
                node[node_key] = value
        elif kind == "drop" and keys:
            del node[draw(st.sampled_from(keys))]
        elif kind == "add" and isinstance(node, dict):
            node[draw(st.one_of(st.sampled_from(["unknown", "__proto__", "constructor", "limit", "filter"]), texts()))] = draw(junk())
        elif keys:
            node[draw(st.sampled_from(keys))] = draw(junk())
        elif isinstance(node, list):
            node.append(draw(junk()))
        else:
            node["x"] = draw(junk())
    elif kind == "raw":
        out.raw = draw(st.sampled_from(RAW_BODIES))
        out.multipart = False
    elif kind == "raw_deep":
        out.raw = Deep(draw(st.sampled_from(sorted(Deep.WRAPPERS))), draw(st.sampled_from(DEEP_DEPTHS))).text().encode()
        out.multipart = False
    elif kind == "query":
        name = draw(st.sampled_from(sorted(out.query.keys()) + ["wait", "timeout", "consistency", "ordering", "priority", "checksum", "force", "exact", "anonymize", "details_level"]))
        out.query[name] = draw(st.one_of(texts(), st.sampled_from(["true", "false", "0", "-1", "18446744073709551616", "1e12", "majority"]), st.lists(st.sampled_from(["true", "1"]), min_size=2, max_size=2)))
    elif out.path_params:
        name = draw(st.sampled_from(sorted(out.path_params)))
        out.path_params[name] = draw(st.one_of(texts(), st.sampled_from(["0", "-1", "1.5", "18446744073709551616", "9007199254740993", UUID_IDS[0].upper(), "..", "."])))
        if out.path_params.get("collection_name") == SENTINEL:
            out.path_params["collection_name"] = TARGETS[0]
    else:
        out.raw = draw(st.sampled_from(RAW_BODIES))
    return out


SWEEP_BASES = 3
SWEEP_NUMBERS = [2**32, 10**12, 2**53 - 1, 1e300, -1]
SWEEP_DEPTHS = [128, 20000]


def boundary_sweep(base: Req, props: set, add_missing: bool):
    """After the generated examples: requests that the node accepted (the SWEEP_BASES
    with the most fields), each with one of its counting fields (COUNT_FIELDS) set to
    each of SWEEP_NUMBERS, and each of its filters and payload values nested SWEEP_DEPTHS
    deep; with `add_missing`, also the limit, offset, params.hnsw_ef, oversampling,
    filter and payload that the operation takes and the request left out. Random draws
    rarely put the one bad number or the one deep value into an otherwise valid request,
    so every operation gets these."""
    if not isinstance(base.body, dict) or base.multipart:
        return
    nodes = containers(base.body, [])
    for n_index, node in enumerate(nodes):
        if not isinstance(node, dict):
            continue
        for key in sorted(node):
            value = node[key]
            changes = []
            if key in COUNT_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool):
                changes = SWEEP_NUMBERS
            elif key in FILTER_KEYS and isinstance(value, dict):
                changes = [Deep("must", d, value) for d in SWEEP_DEPTHS]
            elif key == "payload" and isinstance(value, dict):
                changes = [{**value, "deep": Deep("array", d)} for d in SWEEP_DEPTHS]
            for change in changes:
                out = base.copy()
                containers(out.body, [])[n_index][key] = change
                yield out
    if not add_missing:
        return
    added = {"limit": lambda v: v, "offset": lambda v: v, "params": lambda v: {"hnsw_ef": v}}
    for key, make in added.items():
        if key in props and key not in base.body:
            for v in SWEEP_NUMBERS:
                out = base.copy()
                out.body[key] = make(v)
                yield out
    if "params" in props:
        for v in SWEEP_NUMBERS:
            out = base.copy()
            out.body["params"] = {**(out.body.get("params") if isinstance(out.body.get("params"), dict) else {}), "quantization": {"oversampling": v}}
            yield out
    for key, wrapper, inner in (("filter", "must", {}), ("payload", "array", None)):
        if key in props and key not in base.body:
            for d in SWEEP_DEPTHS:
                out = base.copy()
                out.body[key] = Deep(wrapper, d, inner) if key == "filter" else {"deep": Deep(wrapper, d)}
                yield out


# -- the run ---------------------------------------------------------------------------------------

class Run:
    def __init__(self, server: Server, node: Node) -> None:
        self.server, self.node = server, node
        self.http = requests.Session()
        self.not_implemented = not_implemented()
        self.requests = 0
        self.server_errors = 0
        self.n = 0
        self.failed = 0
        self.dead = False
        self.send_time = 0.0
        # State hashes known to hold now, by the collections they cover (see send()).
        self.known: dict = {}

    def tap(self, ok: bool, name: str, notes=()) -> None:
        self.n += 1
        if not ok:
            self.failed += 1
        print(f"{'ok' if ok else 'not ok'} {self.n} - {name}")
        for note in notes:
            for line in str(note).splitlines():
                print(f"# {line}")
        sys.stdout.flush()

    def state(self, names) -> str:
        return self.node.state(names)

    def send(self, op_key, req: Req, failures: list, sent: set):
        """Sends a request not sent before in this operation and checks the answer; returns its status (None: not sent or no answer)."""
        t0 = time.time()
        try:
            return self._send(op_key, req, failures, sent)
        finally:
            self.send_time += time.time() - t0

    def _send(self, op_key, req: Req, failures: list, sent: set):
        if self.dead:
            return None
        fingerprint = req.fingerprint()
        if fingerprint in sent:
            return None
        sent.add(fingerprint)
        method, template = op_key
        mutating = writes(method, template)
        names = tuple(req.collections())
        before = (self.known.get(names) or self.state(names)) if mutating else None
        kwargs = {"timeout": 60}
        if req.multipart and req.raw is None:
            body = req.body if isinstance(req.body, dict) else {}
            data = body.get("snapshot", b"")
            kwargs["files"] = {"snapshot": ("fuzz.snapshot", data if isinstance(data, bytes) else str(data).encode("utf-8", "surrogatepass"))}
        else:
            data = req.body_bytes()
            if data is not None:
                kwargs["data"] = data
                kwargs["headers"] = {"Content-Type": "application/json"}
        self.requests += 1
        try:
            r = self.http.request(method, self.server.url + req.url(), **kwargs)
        except requests.RequestException as err:
            self.server_errors += 1
            alive = self.server.proc.poll() is None
            failures.append(f"{req.describe()}\n  -> no answer: {err}" + ("" if alive else f"\n  the server exited with {self.server.proc.returncode}; the end of its log:\n" + "\n".join(self.server.log_text().splitlines()[-15:])))
            if not alive:
                self.dead = True
            return None
        status = r.status_code
        if VERBOSE:
            print(f"# {status} {req.describe()[:300]} -> {r.text[:150]}", file=sys.stderr)
        if status >= 500 and not (status == 501 and (method, template) in self.not_implemented):
            self.server_errors += 1
            failures.append(f"{req.describe()}\n  -> {status} {r.text[:400]}")
        if not mutating:
            return status
        if 400 <= status < 500:
            after = self.state(names)
            if after != before:
                failures.append(f"{req.describe()}\n  -> {status} {r.text[:300]}\n  a refused request changed the data of {list(names) or 'the node'}")
                self.known.clear()
            self.known[names] = after
        else:
            # It may have changed something: every state hash is stale. A 202 goes on in the background.
            self.known.clear()
            if status == 202:
                self.settle()
        return status

    def settle(self) -> None:
        """Waits (at most 10 s) until the targets stop changing, after a write accepted to run in the background."""
        last = self.state(TARGETS)
        for _ in range(50):
            time.sleep(0.2)
            now = self.state(TARGETS)
            if now == last:
                return
            last = now

    def operation(self, op, strategy, props) -> None:
        key = (op.method.upper(), op.path)
        failures: list = []
        sent: set = set()
        self.known.clear()
        try:
            for name in TARGETS:
                self.node.restore(name)
            self.node.refresh_snapshots()
        except Exception:
            self.tap(False, f"{key[0]} {key[1]}", ["restoring the target collections failed:", *traceback.format_exc().splitlines()[-4:]])
            self.dead = self.dead or self.server.proc.poll() is not None
            return

        examples = [0]
        accepted: list = []

        @seed(SEED)
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False, phases=[Phase.generate], suppress_health_check=list(HealthCheck), print_blob=False)
        @given(case=strategy, data=st.data())
        def run(case, data):
            index = examples[0]
            examples[0] += 1
            try:
                req = from_case(case, op)
                point_at_targets(req, data.draw, self.node, index)
                fill_fields(req, data.draw, props, self.node)
                realize(req, data.draw)
                status = self.send(key, req, failures, sent)
                if status is not None and 200 <= status < 300 and isinstance(req.body, dict):
                    accepted.append(req.copy())
                self.send(key, mutate(req, data.draw), failures, sent)
            except Exception:  # a bug of the fuzzer itself must show, not stop the run
                failures.append("fuzzer error:\n" + "\n".join(traceback.format_exc().splitlines()[-6:]))
                if self.server.proc.poll() is not None and not self.dead:
                    self.dead = True
                    failures.append(f"the server exited with {self.server.proc.returncode}; the end of its log:\n" + "\n".join(self.server.log_text().splitlines()[-15:]))

        started, sent_before = time.time(), self.requests
        try:
            run()
        except Exception:
            failures.append("hypothesis error:\n" + traceback.format_exc())
        # The accepted requests with the most fields (stable order: the first of equals).
        bases = sorted(accepted, key=lambda r: -len(containers(r.body, [])))[:SWEEP_BASES]
        for i, base in enumerate(bases):
            for req in boundary_sweep(base, props, add_missing=i == 0):
                if self.dead:
                    break
                self.send(key, req, failures, sent)
        notes = failures[:5] + ([f"... and {len(failures) - 5} more"] if len(failures) > 5 else [])
        self.tap(not failures, f"{key[0]} {key[1]}", notes + [f"{self.requests - sent_before} requests, {time.time() - started:.1f} s"])


def main() -> int:
    started = time.time()
    raw = prepared_spec()
    schema = schemathesis.from_dict(raw, base_url="http://127.0.0.1:1")
    ops = []
    for result in schema.get_all_operations():
        op = result.ok()
        if ONLY and ONLY not in f"{op.method.upper()} {op.path}":
            continue
        content = (raw["paths"][op.path][op.method].get("requestBody") or {}).get("content", {})
        props = set()
        for c in content.values():
            body_properties(c.get("schema"), props)
        ops.append((op, props))
    server = Server()
    run = None
    try:
        node = Node(server)
        for name in TARGETS + (SENTINEL,):
            node.create(name)
        for name in TARGETS:
            node.must("POST", f"/collections/{name}/snapshots", params={"wait": "true"})
        sentinel_before = node.sentinel_checksum()
        run = Run(server, node)
        for op, props in ops:
            if run.dead:
                run.tap(False, f"{op.method.upper()} {op.path}", ["not run: the server is down"])
                continue
            run.operation(op, op.as_strategy(), props)
        healthy = False
        try:
            healthy = requests.get(server.url + "/healthz", timeout=10).text == "healthz check passed"
        except requests.RequestException:
            pass
        run.tap(healthy, "the node is healthy at the end (/healthz)")
        sentinel_after = node.sentinel_checksum() if healthy else "unreachable"
        run.tap(sentinel_after == sentinel_before, "the sentinel collection is unchanged", [] if sentinel_after == sentinel_before else [f"before {sentinel_before}, after {sentinel_after}"])
        errors = [line for line in server.log_text().splitlines() if "unhandled error" in line]
        run.tap(not errors, "the server log has no unhandled error", [e[:600] for e in errors[:5]])
        print(f"1..{run.n}")
        print(f"# seed: {SEED} (FUZZ_SEED), examples per operation: {EXAMPLES} (FUZZ_EXAMPLES)")
        print(f"# operations covered: {len(ops)}")
        print(f"# requests sent: {run.requests}")
        print(f"# server errors: {run.server_errors}")
        print(f"# time: {time.time() - started:.1f} s ({run.send_time:.1f} s sending requests and checking the data)")
        print(f"# pass {run.n - run.failed}")
        print(f"# fail {run.failed}")
        return 1 if run.failed else 0
    except Exception:
        n = run.n + 1 if run else 1
        print(f"not ok {n} - the fuzz run")
        for line in traceback.format_exc().splitlines()[-8:]:
            print(f"# {line}")
        if server.proc.poll() is not None:
            print(f"# the server exited with {server.proc.returncode}; the end of its log:")
            for line in server.log_text().splitlines()[-15:]:
                print(f"# {line[:1000]}")
        print(f"1..{n}")
        return 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
