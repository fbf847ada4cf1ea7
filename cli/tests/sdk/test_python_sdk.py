"""The official Azure Cosmos DB Python SDK (azure-cosmos, pinned in requirements.txt) against
`ebbdb serve`: a real client no one here wrote, over plain http, with the emulator key.

One server per test module (a fresh temporary directory, a free port); run by run.sh, which
`.ci/run` calls. Expiry is tested on the real clock with a TTL of one second: ebbdb's expiry is
exact, so the item must read as 404 as soon as the second `_ts + 1` has begun.
"""

import logging
import os
import signal
import subprocess
import tempfile
import time
import uuid

import pytest
from azure.core import MatchConditions
from azure.cosmos import CosmosClient, PartitionKey, exceptions

KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


@pytest.fixture(scope="module")
def server():
    binary = os.environ["EBBDB_BIN"]
    with tempfile.TemporaryDirectory() as root:
        proc = subprocess.Popen(
            [binary, "serve", os.path.join(root, "data"), "--addr", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = proc.stdout.readline()
        assert "listening on http://" in line, line + proc.stderr.read()
        endpoint = line.split("listening on ")[1].split()[0]
        try:
            yield endpoint
        finally:
            # Ctrl-C: the server finishes, syncs, closes and exits 0.
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err
            assert "synced and closed" in out, out + err


@pytest.fixture(scope="module")
def client(server):
    return CosmosClient(server, credential=KEY)


@pytest.fixture()
def container(client):
    db = client.create_database_if_not_exists("sdk")
    name = "c" + uuid.uuid4().hex[:8]
    c = db.create_container(name, PartitionKey("/customerId"), default_ttl=3600)
    yield c
    db.delete_container(name)


def status_of(fn):
    with pytest.raises(exceptions.CosmosHttpResponseError) as e:
        fn()
    return e.value.status_code


def test_account_advertises_this_server(client, server):
    props = client.get_database_account()
    locations = [loc["databaseAccountEndpoint"] for loc in props.WritableLocations]
    assert locations == [server]
    assert props.ConsistencyPolicy["defaultConsistencyLevel"] == "Session"


def test_databases_and_containers(client):
    db = client.create_database("shop")
    assert status_of(lambda: client.create_database("shop")) == 409
    assert "shop" in [d["id"] for d in client.list_databases()]
    c = db.create_container("orders", PartitionKey("/customerId"), default_ttl=5)
    props = c.read()
    assert props["defaultTtl"] == 5
    assert props["partitionKey"]["paths"] == ["/customerId"]
    assert status_of(lambda: db.create_container("orders", PartitionKey("/customerId"))) == 409
    # Replace changes the TTL (and only what ebbdb keeps).
    db.replace_container(c, PartitionKey("/customerId"), default_ttl=-1)
    assert c.read()["defaultTtl"] == -1
    db.replace_container(c, PartitionKey("/customerId"))
    assert "defaultTtl" not in c.read()
    assert [p["id"] for p in db.list_containers()] == ["orders"]
    # An invalid defaultTtl is the Cosmos 400 with its message.
    with pytest.raises(exceptions.CosmosHttpResponseError) as e:
        db.create_container("bad", PartitionKey("/p"), default_ttl=0)
    assert e.value.status_code == 400
    assert "The input defaultTtl '0' is invalid" in e.value.message
    db.delete_container("orders")
    assert status_of(lambda: c.read()) == 404
    client.delete_database("shop")
    assert status_of(lambda: client.get_database_client("shop").read()) == 404
    assert "shop" not in [d["id"] for d in client.list_databases()]


def test_crud_upsert_and_errors(container):
    c = container
    created = c.create_item({"id": "SO1", "customerId": "C1", "total": 10})
    assert created["_etag"] and isinstance(created["_ts"], int)
    assert "ttl" not in created  # the default is never written into the item
    read = c.read_item("SO1", partition_key="C1")
    assert read == created
    # 409 on a duplicate create; the same id in another partition is fine.
    assert status_of(lambda: c.create_item({"id": "SO1", "customerId": "C1"})) == 409
    c.create_item({"id": "SO1", "customerId": "C2"})
    # Replace renews the etag.
    replaced = c.replace_item("SO1", {"id": "SO1", "customerId": "C1", "total": 11})
    assert replaced["_etag"] != created["_etag"]
    assert c.read_item("SO1", partition_key="C1")["total"] == 11
    # Upsert creates, then replaces.
    c.upsert_item({"id": "SO2", "customerId": "C1", "total": 1})
    c.upsert_item({"id": "SO2", "customerId": "C1", "total": 2})
    assert c.read_item("SO2", partition_key="C1")["total"] == 2
    # 404 for a missing item: read, replace, delete.
    assert status_of(lambda: c.read_item("nope", partition_key="C1")) == 404
    assert status_of(lambda: c.replace_item("nope", {"id": "nope", "customerId": "C1"})) == 404
    assert status_of(lambda: c.delete_item("nope", partition_key="C1")) == 404
    # Wrong partition: 404 too.
    assert status_of(lambda: c.read_item("SO2", partition_key="C9")) == 404
    # An invalid ttl is the Cosmos 400.
    assert status_of(lambda: c.create_item({"id": "t", "customerId": "C1", "ttl": 0})) == 400
    # Over the 2 MiB item limit: 413.
    big = {"id": "big", "customerId": "C1", "blob": "x" * (2 * 1024 * 1024 + 10)}
    assert status_of(lambda: c.create_item(big)) == 413
    # Delete, then 404.
    c.delete_item("SO2", partition_key="C1")
    assert status_of(lambda: c.read_item("SO2", partition_key="C1")) == 404


def test_names_that_need_url_encoding(client):
    # The SDK URL-encodes names in the path and signs them unencoded: ids with spaces, `+`,
    # `%` and non-ASCII letters must round-trip through both.
    db = client.create_database_if_not_exists("sdk é+%")
    c = db.create_container_if_not_exists("cöll 1", PartitionKey("/pk"))
    item_id = "a b+c%20é"
    c.create_item({"id": item_id, "pk": "ü x"})
    assert c.read_item(item_id, partition_key="ü x")["id"] == item_id
    c.delete_item(item_id, partition_key="ü x")
    assert status_of(lambda: c.read_item(item_id, partition_key="ü x")) == 404
    assert "cöll 1" in [p["id"] for p in db.list_containers()]
    client.delete_database(db)


def test_etags_412(container):
    c = container
    first = c.create_item({"id": "e", "customerId": "C1", "v": 1})
    second = c.replace_item(
        "e", {"id": "e", "customerId": "C1", "v": 2},
        etag=first["_etag"], match_condition=MatchConditions.IfNotModified)
    stale = first["_etag"]
    assert status_of(lambda: c.replace_item(
        "e", {"id": "e", "customerId": "C1", "v": 3},
        etag=stale, match_condition=MatchConditions.IfNotModified)) == 412
    assert status_of(lambda: c.upsert_item(
        {"id": "e", "customerId": "C1", "v": 3},
        etag=stale, match_condition=MatchConditions.IfNotModified)) == 412
    assert status_of(lambda: c.delete_item(
        "e", partition_key="C1", etag=stale, match_condition=MatchConditions.IfNotModified)) == 412
    assert c.read_item("e", partition_key="C1")["v"] == 2
    c.delete_item("e", partition_key="C1", etag=second["_etag"],
                  match_condition=MatchConditions.IfNotModified)
    assert status_of(lambda: c.read_item("e", partition_key="C1")) == 404


def test_patch_item(container):
    c = container
    created = c.create_item({"id": "p", "customerId": "C1", "n": 1, "tags": ["a"], "old": True})
    patched = c.patch_item("p", partition_key="C1", patch_operations=[
        {"op": "set", "path": "/status", "value": "shipped"},
        {"op": "incr", "path": "/n", "value": 2},
        {"op": "add", "path": "/tags/-", "value": "b"},
        {"op": "remove", "path": "/old"},
    ])
    assert patched["status"] == "shipped" and patched["n"] == 3
    assert patched["tags"] == ["a", "b"] and "old" not in patched
    assert patched["_etag"] != created["_etag"]
    assert c.read_item("p", partition_key="C1") == patched
    # A condition the item meets patches; one it does not meet is 412 and writes nothing.
    met = c.patch_item("p", partition_key="C1", filter_predicate="FROM c WHERE c.n = 3",
                       patch_operations=[{"op": "replace", "path": "/status", "value": "done"}])
    assert met["status"] == "done"
    with pytest.raises(exceptions.CosmosAccessConditionFailedError) as e:
        c.patch_item("p", partition_key="C1", filter_predicate="FROM c WHERE c.n > 100",
                     patch_operations=[{"op": "set", "path": "/status", "value": "lost"}])
    assert e.value.status_code == 412
    # A stale etag: 412; the current one patches.
    assert status_of(lambda: c.patch_item(
        "p", partition_key="C1", patch_operations=[{"op": "incr", "path": "/n", "value": 100}],
        etag=patched["_etag"], match_condition=MatchConditions.IfNotModified)) == 412
    assert c.read_item("p", partition_key="C1")["n"] == 3
    now = c.patch_item(
        "p", partition_key="C1", patch_operations=[{"op": "incr", "path": "/n", "value": 1}],
        etag=met["_etag"], match_condition=MatchConditions.IfNotModified)
    assert now["n"] == 4
    # 404 for a missing item; 400 for an unknown op or a protected path.
    assert status_of(lambda: c.patch_item(
        "nope", partition_key="C1", patch_operations=[{"op": "set", "path": "/a", "value": 1}])) == 404
    assert status_of(lambda: c.patch_item(
        "p", partition_key="C1", patch_operations=[{"op": "frob", "path": "/a", "value": 1}])) == 400
    assert status_of(lambda: c.patch_item(
        "p", partition_key="C1",
        patch_operations=[{"op": "set", "path": "/customerId", "value": "C2"}])) == 400
    assert c.read_item("p", partition_key="C1") == now


def test_transactional_batch(container):
    c = container
    c.create_item({"id": "old", "customerId": "C1", "n": 1})
    results = c.execute_item_batch([
        ("create", ({"id": "b1", "customerId": "C1", "n": 1},)),
        ("upsert", ({"id": "b2", "customerId": "C1", "n": 1},)),
        ("replace", ("b2", {"id": "b2", "customerId": "C1", "n": 2})),
        ("patch", ("old", [{"op": "incr", "path": "/n", "value": 5}])),
        ("read", ("old",)),
        ("delete", ("b1",)),
    ], partition_key="C1")
    assert [r["statusCode"] for r in results] == [201, 201, 200, 200, 200, 204]
    assert results[4]["resourceBody"]["n"] == 6
    assert status_of(lambda: c.read_item("b1", partition_key="C1")) == 404
    assert c.read_item("b2", partition_key="C1")["n"] == 2
    before = c.read_item("old", partition_key="C1")

    # A failing create in the middle: CosmosBatchOperationError naming it, nothing written.
    with pytest.raises(exceptions.CosmosBatchOperationError) as e:
        c.execute_item_batch([
            ("create", ({"id": "n1", "customerId": "C1"},)),
            ("patch", ("old", [{"op": "set", "path": "/n", "value": 100}])),
            ("create", ({"id": "b2", "customerId": "C1"},)),
            ("create", ({"id": "n2", "customerId": "C1"},)),
        ], partition_key="C1")
    assert e.value.error_index == 2
    assert e.value.status_code == 409
    assert [r["statusCode"] for r in e.value.operation_responses] == [424, 424, 409, 424]
    for item_id in ["n1", "n2"]:
        assert status_of(lambda: c.read_item(item_id, partition_key="C1")) == 404
    assert c.read_item("old", partition_key="C1") == before

    # A stale if_match_etag and an unmet patch condition fail the batch with 412.
    stale = before["_etag"]
    c.patch_item("old", partition_key="C1", patch_operations=[{"op": "set", "path": "/v", "value": 1}])
    with pytest.raises(exceptions.CosmosBatchOperationError) as e:
        c.execute_item_batch([
            ("replace", ("old", {"id": "old", "customerId": "C1"}), {"if_match_etag": stale}),
        ], partition_key="C1")
    assert (e.value.error_index, e.value.status_code) == (0, 412)
    with pytest.raises(exceptions.CosmosBatchOperationError) as e:
        c.execute_item_batch([
            ("read", ("old",)),
            ("patch", ("old", [{"op": "set", "path": "/v", "value": 2}]),
             {"filter_predicate": "FROM c WHERE c.v = 5"}),
        ], partition_key="C1")
    assert (e.value.error_index, e.value.status_code) == (1, 412)
    assert c.read_item("old", partition_key="C1")["v"] == 1


def test_query_parameters_and_paging(container):
    c = container
    for i in range(7):
        c.create_item({"id": f"a{i}", "customerId": "C1", "n": i})
    c.create_item({"id": "b0", "customerId": "C2", "n": 100})
    rows = list(c.query_items(
        "SELECT VALUE c.id FROM c WHERE c.n >= @min ORDER BY c.n",
        parameters=[{"name": "@min", "value": 3}], partition_key="C1"))
    assert rows == ["a3", "a4", "a5", "a6"]
    # Pages of at most 3; resume a new iterator from the continuation token.
    q = "SELECT * FROM c WHERE c.n < @max"
    params = [{"name": "@max", "value": 50}]
    pager = c.query_items(q, parameters=params, partition_key="C1", max_item_count=3).by_page()
    first = list(next(pager))
    token = pager.continuation_token
    assert len(first) == 3 and token
    rest = []
    pager = c.query_items(q, parameters=params, partition_key="C1",
                          max_item_count=3).by_page(token)
    for page in pager:
        page = list(page)
        assert 0 < len(page) <= 3
        rest.extend(page)
    ids = [r["id"] for r in first + rest]
    assert sorted(ids) == [f"a{i}" for i in range(7)]
    assert len(ids) == 7  # each item exactly once
    # A bad query is the 400 naming the position.
    with pytest.raises(exceptions.CosmosHttpResponseError) as e:
        list(c.query_items("SELECT * FROM c WHERE", partition_key="C1"))
    assert e.value.status_code == 400


def test_cross_partition_query(container):
    c = container
    for pk, n in [("C1", 5), ("C2", 9), ("C3", 1), ("C2", 4)]:
        c.create_item({"id": f"{pk}-{n}", "customerId": pk, "n": n})
    rows = list(c.query_items("SELECT VALUE c.n FROM c ORDER BY c.n DESC",
                              enable_cross_partition_query=True))
    assert rows == [9, 5, 4, 1]
    assert list(c.query_items("SELECT VALUE COUNT(1) FROM c",
                              enable_cross_partition_query=True)) == [4]
    assert list(c.query_items("SELECT VALUE SUM(c.n) FROM c WHERE c.n > @x",
                              parameters=[{"name": "@x", "value": 3}],
                              enable_cross_partition_query=True)) == [18]
    # Paged across partitions: every page at most 1 row, all rows in order.
    pages = [list(p) for p in c.query_items(
        "SELECT VALUE c.n FROM c ORDER BY c.n", enable_cross_partition_query=True,
        max_item_count=1).by_page()]
    assert [r for p in pages for r in p] == [1, 4, 5, 9]
    assert all(len(p) <= 1 for p in pages)
    # Reading every item (the read feed), across partitions.
    assert sorted(i["id"] for i in c.read_all_items()) == ["C1-5", "C2-4", "C2-9", "C3-1"]


def test_cross_partition_query_goes_through_the_query_plan(container, server, caplog):
    # The gateway answers a query without a partition key with substatus 1004; the SDK then
    # asks for the query plan and sends the query to the one partition key range.
    container.create_item({"id": "x", "customerId": "C1", "n": 1})
    logged = CosmosClient(server, credential=KEY, logging_enable=True)
    c = logged.get_database_client("sdk").get_container_client(container.id)
    with caplog.at_level(logging.DEBUG, logger="azure"):
        assert list(c.query_items("SELECT VALUE c.n FROM c",
                                  enable_cross_partition_query=True)) == [1]
    text = caplog.text.lower()
    assert "x-ms-cosmos-is-query-plan-request" in text
    assert "x-ms-documentdb-partitionkeyrangeid" in text


def alive_before(deadline, read):
    """Reads an item; it must be there when the whole read finished before `deadline` (Unix
    seconds). A read that ended later may have been answered after expiry: then either
    answer is right, and the check says nothing."""
    try:
        read()
        found = True
    except exceptions.CosmosHttpResponseError as e:
        assert e.status_code == 404
        found = False
    if time.time() < deadline:
        assert found, "the item was gone before its deadline"


def test_ttl_one_second_is_exact(client):
    db = client.create_database_if_not_exists("sdk")
    c = db.create_container("ttl" + uuid.uuid4().hex[:6], PartitionKey("/pk"), default_ttl=-1)
    c.create_item({"id": "keep", "pk": "p"})
    item = c.create_item({"id": "short", "pk": "p", "ttl": 1})
    deadline = item["_ts"] + 1  # expired from this Unix second on
    alive_before(deadline, lambda: c.read_item("short", partition_key="p"))
    # Bounded wait on the real clock: until the deadline second has begun.
    while time.time() < deadline + 0.02:
        time.sleep(0.02)
    assert time.time() < deadline + 2, "the test itself was too slow to check exactness"
    assert status_of(lambda: c.read_item("short", partition_key="p")) == 404
    assert status_of(lambda: c.replace_item("short", {"id": "short", "pk": "p"})) == 404
    assert status_of(lambda: c.delete_item("short", partition_key="p")) == 404
    assert [r["id"] for r in c.query_items("SELECT * FROM c", partition_key="p")] == ["keep"]
    # Created again after expiry, as if it had never existed.
    c.create_item({"id": "short", "pk": "p"})
    assert c.read_item("short", partition_key="p")["id"] == "short"
    db.delete_container(c)


def wait_until(unix_secs):
    """Sleeps until the wall clock has passed `unix_secs` (by a hair)."""
    while time.time() < unix_secs + 0.02:
        time.sleep(0.02)


def test_ttl_rules_on_the_real_clock(client):
    # Contract §2 over the wire, with 1-2 second TTLs: container 1 s / -1 / off, an upsert
    # restarting the countdown, turning TTL on over old items, queries and counts without
    # expired items, re-creation after expiry. About 3 s of real time.
    db = client.create_database_if_not_exists("sdk")
    tag = uuid.uuid4().hex[:6]
    short = db.create_container("short" + tag, PartitionKey("/pk"), default_ttl=1)
    never = db.create_container("never" + tag, PartitionKey("/pk"), default_ttl=-1)
    off = db.create_container("off" + tag, PartitionKey("/pk"))
    a = short.create_item({"id": "inherits", "pk": "p"})
    short.create_item({"id": "forever", "pk": "p", "ttl": -1})
    never.create_item({"id": "inherits", "pk": "p"})
    b = never.create_item({"id": "own", "pk": "p", "ttl": 1})
    u = never.create_item({"id": "restarted", "pk": "p", "ttl": 2})
    c = off.create_item({"id": "own", "pk": "p", "ttl": 1})

    # An upsert in a later second restarts the 2 s countdown.
    wait_until(u["_ts"] + 1)
    u2 = never.upsert_item({"id": "restarted", "pk": "p", "ttl": 2})
    assert u2["_ts"] > u["_ts"]
    wait_until(max(a["_ts"], b["_ts"], c["_ts"], u["_ts"] + 1) + 1)
    # Its first deadline has passed; its second has not (checked when the read was quick
    # enough to tell).
    alive_before(u2["_ts"] + 2, lambda: never.read_item("restarted", partition_key="p"))
    # Container 1 s: the inheriting item is gone, the `ttl: -1` one stays.
    assert status_of(lambda: short.read_item("inherits", partition_key="p")) == 404
    assert short.read_item("forever", partition_key="p")["ttl"] == -1
    # Container -1: only items with their own ttl expire.
    assert never.read_item("inherits", partition_key="p")["id"] == "inherits"
    assert status_of(lambda: never.read_item("own", partition_key="p")) == 404
    # TTL off: an item's own ttl is ignored...
    assert off.read_item("own", partition_key="p")["ttl"] == 1
    # ...until TTL is turned on: then it is past due at once.
    db.replace_container(off, PartitionKey("/pk"), default_ttl=-1)
    assert status_of(lambda: off.read_item("own", partition_key="p")) == 404
    # Queries and counts never see expired items.
    assert list(short.query_items("SELECT VALUE c.id FROM c", partition_key="p")) == ["forever"]
    before = time.time()
    n = list(never.query_items("SELECT VALUE COUNT(1) FROM c", enable_cross_partition_query=True))
    after = time.time()
    if after < u2["_ts"] + 2:
        assert n == [2]  # "inherits" and "restarted"
    elif before >= u2["_ts"] + 2:
        assert n == [1]
    wait_until(u2["_ts"] + 2)
    assert status_of(lambda: never.read_item("restarted", partition_key="p")) == 404
    assert list(never.query_items("SELECT VALUE COUNT(1) FROM c",
                                  enable_cross_partition_query=True)) == [1]
    # Re-created after expiry as if it had never existed.
    again = short.create_item({"id": "inherits", "pk": "p", "ttl": 60})
    assert again["ttl"] == 60
    for container in (short, never, off):
        db.delete_container(container)


def test_wrong_key_is_401(server):
    wrong = KEY[:10] + ("A" if KEY[10] != "A" else "B") + KEY[11:]
    with pytest.raises(exceptions.CosmosHttpResponseError) as e:
        # The client reads the account while it is built: that is already refused.
        list(CosmosClient(server, credential=wrong).list_databases())
    assert e.value.status_code == 401


def test_change_feed_latest_version(container):
    for i in range(3):
        container.create_item({"id": f"a{i}", "customerId": "C1" if i < 2 else "C2"})
    # From now: nothing yet; its continuation sees what comes next.
    assert list(container.query_items_change_feed(start_time="Now")) == []
    from_now = container.client_connection.last_response_headers["etag"]
    # From the beginning: every item, in write order; save the continuation.
    first = [d["id"] for d in container.query_items_change_feed(start_time="Beginning")]
    assert first == ["a0", "a1", "a2"]
    token = container.client_connection.last_response_headers["etag"]
    # Nothing new: nothing from the continuation.
    assert list(container.query_items_change_feed(continuation=token)) == []
    container.create_item({"id": "b0", "customerId": "C2"})
    container.upsert_item({"id": "a0", "customerId": "C1", "n": 7})
    newer = list(container.query_items_change_feed(continuation=token))
    assert [(d["id"], d.get("n")) for d in newer] == [("b0", None), ("a0", 7)]
    assert [d["id"] for d in container.query_items_change_feed(continuation=from_now)] == ["b0", "a0"]
    # Small pages: the SDK follows the etags to the end.
    paged = container.query_items_change_feed(start_time="Beginning", max_item_count=1)
    assert [d["id"] for d in paged] == ["a1", "a2", "b0", "a0"]
    # One partition (the SDK sends the key's hash range): exactly its items, and its
    # continuation sees only that partition's later writes.
    c2 = [d["id"] for d in container.query_items_change_feed(start_time="Beginning", partition_key="C2")]
    assert c2 == ["a2", "b0"]
    c2_token = container.client_connection.last_response_headers["etag"]
    container.create_item({"id": "c0", "customerId": "C1"})
    container.create_item({"id": "c1", "customerId": "C2"})
    assert [d["id"] for d in container.query_items_change_feed(continuation=c2_token)] == ["c1"]
    c1 = container.query_items_change_feed(start_time="Beginning", partition_key="C1", max_item_count=1)
    assert [d["id"] for d in c1] == ["a1", "a0", "c0"]
    # All versions and deletes needs a change feed retention (changeFeedPolicy): 400 here.
    assert status_of(lambda: list(container.query_items_change_feed(
        mode="AllVersionsAndDeletes", start_time="Now"))) == 400


def test_change_feed_all_versions_and_deletes_reports_a_ttl_expiry(client):
    # Every create, replace and delete, and the TTL expiry flagged timeToLiveExpired, read
    # through the SDK's all-versions-and-deletes mode; the expiry on the real clock (ttl 1 s,
    # bounded polling).
    db = client.create_database_if_not_exists("sdk")
    c = db.create_container("avad" + uuid.uuid4().hex[:6], PartitionKey("/pk"), default_ttl=-1,
                            change_feed_policy={"retentionDuration": 10})
    assert list(c.query_items_change_feed(mode="AllVersionsAndDeletes", start_time="Now")) == []
    token = c.client_connection.last_response_headers["etag"]
    short = c.create_item({"id": "short", "pk": "p", "ttl": 1})
    c.create_item({"id": "keep", "pk": "p"})
    c.upsert_item({"id": "keep", "pk": "p", "n": 2})
    c.delete_item("keep", partition_key="p")
    seen = []
    deadline = short["_ts"] + 1 + 5  # the expiry instant plus a generous bound
    while time.time() < deadline:
        page = list(c.query_items_change_feed(mode="AllVersionsAndDeletes", continuation=token))
        token = c.client_connection.last_response_headers["etag"]
        seen.extend(page)
        if any(ch["metadata"].get("timeToLiveExpired") for ch in seen):
            break
        time.sleep(0.05)
    shape = [(ch["metadata"]["operationType"], ch["metadata"].get("id") or ch["current"]["id"],
              ch["metadata"].get("timeToLiveExpired", False)) for ch in seen]
    assert shape == [("create", "short", False), ("create", "keep", False),
                     ("replace", "keep", False), ("delete", "keep", False),
                     ("delete", "short", True)], shape
    expiry = seen[-1]
    assert expiry["metadata"]["crts"] == short["_ts"] + 1
    assert expiry["previous"] == {"id": "short", "pk": "p"}
    assert seen[2]["current"]["n"] == 2
    assert seen[2]["metadata"]["previousImageLSN"] == seen[1]["metadata"]["lsn"]
    # Reported once: nothing more from the last continuation.
    assert list(c.query_items_change_feed(mode="AllVersionsAndDeletes", continuation=token)) == []
    db.delete_container(c)
