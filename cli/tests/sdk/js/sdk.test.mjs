// The official Azure Cosmos DB JavaScript SDK (@azure/cosmos, pinned in package.json) against
// `ebbdb serve` over plain http with the emulator key; run by ../run.sh with node's own test
// runner. One server for the file (a fresh temporary directory, a free port).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CosmosClient } from "@azure/cosmos";

const KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==";
let server;
let endpoint;
let root;
let client;

before(async () => {
  root = mkdtempSync(join(tmpdir(), "ebbdb-js-"));
  server = spawn(process.env.EBBDB_BIN, ["serve", join(root, "data"), "--addr", "127.0.0.1:0"]);
  endpoint = await new Promise((resolve, reject) => {
    let out = "";
    server.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    server.on("exit", (code) => reject(new Error(`ebbdb serve exited with ${code}`)));
  });
  client = new CosmosClient({ endpoint, key: KEY });
});

after(async () => {
  const exited = new Promise((resolve) => server.on("exit", (code) => resolve(code)));
  server.kill("SIGINT");
  assert.equal(await exited, 0);
  rmSync(root, { recursive: true, force: true });
});

async function status(promise) {
  try {
    await promise;
  } catch (e) {
    return e.code;
  }
  return 200;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("account, databases and containers", async () => {
  const { resource: account } = await client.getDatabaseAccount();
  assert.deepEqual(account.writableLocations.map((l) => l.databaseAccountEndpoint), [endpoint]);
  const { database } = await client.databases.createIfNotExists({ id: "js" });
  assert.equal(await status(client.databases.create({ id: "js" })), 409);
  const { container } = await database.containers.create({
    id: "ttl5", partitionKey: { paths: ["/pk"] }, defaultTtl: 5,
  });
  const { resource: props } = await container.read();
  assert.equal(props.defaultTtl, 5);
  await container.replace({ id: "ttl5", partitionKey: { paths: ["/pk"] }, defaultTtl: -1 });
  assert.equal((await container.read()).resource.defaultTtl, -1);
  assert.equal(await status(database.containers.create({ id: "bad", partitionKey: { paths: ["/pk"] }, defaultTtl: 0 })), 400);
  await container.delete();
  assert.equal((await container.read().catch((e) => e)).code, 404);
});

test("items: CRUD, upsert, 404, 409, 412", async () => {
  const { database } = await client.databases.createIfNotExists({ id: "js" });
  const { container } = await database.containers.createIfNotExists({ id: "crud", partitionKey: { paths: ["/pk"] } });
  const { resource: created } = await container.items.create({ id: "a", pk: "P", n: 1 });
  assert.ok(created._etag);
  assert.equal(await status(container.items.create({ id: "a", pk: "P" })), 409);
  const { resource: read, statusCode } = await container.item("a", "P").read();
  assert.equal(statusCode, 200);
  assert.equal(read.n, 1);
  assert.equal((await container.item("nope", "P").read()).statusCode, 404);
  const { resource: replaced } = await container.item("a", "P").replace({ id: "a", pk: "P", n: 2 });
  assert.notEqual(replaced._etag, created._etag);
  const stale = { accessCondition: { type: "IfMatch", condition: created._etag } };
  assert.equal(await status(container.item("a", "P").replace({ id: "a", pk: "P", n: 3 }, stale)), 412);
  assert.equal(await status(container.item("a", "P").delete(stale)), 412);
  await container.items.upsert({ id: "b", pk: "P", n: 1 });
  await container.items.upsert({ id: "b", pk: "P", n: 5 });
  assert.equal((await container.item("b", "P").read()).resource.n, 5);
  await container.item("a", "P").delete();
  assert.equal((await container.item("a", "P").read()).statusCode, 404);
  assert.equal(await status(container.item("a", "P").delete()), 404);
});

test("patch: operations, condition, If-Match", async () => {
  const { database } = await client.databases.createIfNotExists({ id: "js" });
  const { container } = await database.containers.createIfNotExists({ id: "patch", partitionKey: { paths: ["/pk"] } });
  const { resource: created } = await container.items.create({ id: "a", pk: "P", n: 1, tags: ["x"], old: true });
  const { resource: patched, statusCode } = await container.item("a", "P").patch([
    { op: "set", path: "/status", value: "shipped" },
    { op: "incr", path: "/n", value: 2 },
    { op: "add", path: "/tags/-", value: "y" },
    { op: "remove", path: "/old" },
  ]);
  assert.equal(statusCode, 200);
  assert.deepEqual([patched.status, patched.n, patched.tags, patched.old], ["shipped", 3, ["x", "y"], undefined]);
  assert.notEqual(patched._etag, created._etag);
  const { resource: met } = await container.item("a", "P").patch({
    condition: "FROM c WHERE c.n = 3",
    operations: [{ op: "replace", path: "/status", value: "done" }],
  });
  assert.equal(met.status, "done");
  assert.equal(await status(container.item("a", "P").patch({
    condition: "FROM c WHERE c.n > 100",
    operations: [{ op: "set", path: "/status", value: "lost" }],
  })), 412);
  assert.equal(await status(container.item("a", "P").patch(
    [{ op: "incr", path: "/n", value: 100 }],
    { accessCondition: { type: "IfMatch", condition: created._etag } },
  )), 412);
  assert.equal(await status(container.item("nope", "P").patch([{ op: "set", path: "/a", value: 1 }])), 404);
  assert.equal(await status(container.item("a", "P").patch([{ op: "set", path: "/pk", value: "Q" }])), 400);
  assert.deepEqual((await container.item("a", "P").read()).resource, met);
});

test("transactional batch: all or nothing", async () => {
  const { database } = await client.databases.createIfNotExists({ id: "js" });
  const { container } = await database.containers.createIfNotExists({ id: "batch", partitionKey: { paths: ["/pk"] } });
  const ok = await container.items.batch([
    { operationType: "Create", resourceBody: { id: "a", pk: "P", n: 1 } },
    { operationType: "Upsert", resourceBody: { id: "b", pk: "P", n: 1 } },
    { operationType: "Patch", id: "a", resourceBody: { operations: [{ op: "incr", path: "/n", value: 4 }] } },
    { operationType: "Read", id: "a" },
    { operationType: "Delete", id: "b" },
  ], "P");
  assert.equal(ok.code, 200);
  assert.deepEqual(ok.result.map((r) => r.statusCode), [201, 201, 200, 200, 204]);
  assert.equal(ok.result[3].resourceBody.n, 5);
  assert.equal((await container.item("b", "P").read()).statusCode, 404);
  const before = (await container.item("a", "P").read()).resource;
  // A failing create in the middle: 207, its 409 and 424 for the others, nothing written.
  const failed = await container.items.batch([
    { operationType: "Create", resourceBody: { id: "n1", pk: "P" } },
    { operationType: "Replace", id: "a", resourceBody: { id: "a", pk: "P", n: 100 } },
    { operationType: "Create", resourceBody: { id: "a", pk: "P" } },
  ], "P");
  assert.equal(failed.code, 207);
  assert.deepEqual(failed.result.map((r) => r.statusCode), [424, 424, 409]);
  assert.equal((await container.item("n1", "P").read()).statusCode, 404);
  assert.deepEqual((await container.item("a", "P").read()).resource, before);
});

test("queries: parameters, one partition, across partitions, paging", async () => {
  const { database } = await client.databases.createIfNotExists({ id: "js" });
  const { container } = await database.containers.createIfNotExists({ id: "q", partitionKey: { paths: ["/pk"] } });
  for (let i = 0; i < 7; i++) {
    await container.items.create({ id: `i${i}`, pk: i % 2 ? "odd" : "even", n: i });
  }
  const spec = { query: "SELECT VALUE c.n FROM c WHERE c.n >= @min ORDER BY c.n DESC", parameters: [{ name: "@min", value: 2 }] };
  assert.deepEqual((await container.items.query(spec).fetchAll()).resources, [6, 5, 4, 3, 2]);
  assert.deepEqual((await container.items.query(spec, { partitionKey: "odd" }).fetchAll()).resources, [5, 3]);
  assert.deepEqual((await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll()).resources, [7]);
  // Pages of 3 in one partition, resumed from a continuation token by a new iterator.
  const q = "SELECT VALUE c.n FROM c ORDER BY c.n";
  const first = await container.items.query(q, { partitionKey: "even", maxItemCount: 3 }).fetchNext();
  assert.deepEqual(first.resources, [0, 2, 4]);
  assert.ok(first.continuationToken);
  const rest = await container.items
    .query(q, { partitionKey: "even", maxItemCount: 3, continuationToken: first.continuationToken })
    .fetchNext();
  assert.deepEqual(rest.resources, [6]);
  // Across partitions, page by page.
  const it = container.items.query(q, { maxItemCount: 2 });
  const seen = [];
  while (it.hasMoreResults()) {
    const page = await it.fetchNext();
    assert.ok(page.resources.length <= 2);
    seen.push(...page.resources);
  }
  assert.deepEqual(seen, [0, 1, 2, 3, 4, 5, 6]);
  assert.equal(await status(container.items.query("SELECT * FROM c WHERE", { partitionKey: "odd" }).fetchAll()), 400);
});

test("ttl: 1 s is exact on the real clock", async () => {
  const { database } = await client.databases.createIfNotExists({ id: "js" });
  const { container } = await database.containers.createIfNotExists({
    id: "ttl", partitionKey: { paths: ["/pk"] }, defaultTtl: -1,
  });
  const { resource: item } = await container.items.create({ id: "short", pk: "p", ttl: 1 });
  await container.items.create({ id: "keep", pk: "p" });
  while (Date.now() < (item._ts + 1) * 1000 + 20) await sleep(20);
  assert.ok(Date.now() < (item._ts + 3) * 1000, "the test itself was too slow");
  assert.equal((await container.item("short", "p").read()).statusCode, 404);
  assert.deepEqual((await container.items.query("SELECT VALUE c.id FROM c", { partitionKey: "p" }).fetchAll()).resources, ["keep"]);
  await container.items.create({ id: "short", pk: "p" });
});

test("a wrong key is a 401", async () => {
  const wrong = new CosmosClient({ endpoint, key: "AAAA" + KEY.slice(4) });
  assert.equal(await status(wrong.databases.readAll().fetchAll()), 401);
});
