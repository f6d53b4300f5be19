// docs/openapi.json is what the routes' schemas produce (`npm run docs:openapi`), and it is an
// OpenAPI 3.1 document: the structure checked here, every $ref resolving, every endpoint present.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { API_OPERATIONS, API_PATHS } from "../../../src/http/api.js";
import { buildOpenApi, openApiText } from "../../../src/http/openapi.js";
import { RECEIVER_BASE_PATH } from "../../../src/inbound/routes.js";
import { projectRoot } from "../../../src/local/project-root.js";

const version = (JSON.parse(readFileSync(join(projectRoot, "package.json"), "utf8")) as { version: string })
  .version;
// biome-ignore lint/suspicious/noExplicitAny: a JSON document, walked key by key
type Doc = any;

test("the committed docs/openapi.json equals what the routes produce (run `npm run docs:openapi`)", (t) => {
  const committed = readFileSync(join(projectRoot, "docs", "openapi.json"), "utf8");
  t.is(committed, openApiText(version));
});

test("an OpenAPI 3.1 document: version, info, paths, components", (t) => {
  const d: Doc = buildOpenApi(version);
  t.is(d.openapi, "3.1.0");
  t.is(typeof d.info.title, "string");
  t.is(d.info.version, version);
  t.is(typeof d.paths, "object");
  t.true(Object.keys(d.components.schemas).length > 0);
  t.deepEqual(d.components.securitySchemes.serviceToken, {
    type: "http",
    scheme: "bearer",
    description: "BITRIX_SYNC_SERVICE_TOKEN (a secret, §12.1).",
  });
  for (const [path, item] of Object.entries(d.paths as Record<string, Doc>)) {
    t.true(path.startsWith("/"), path);
    for (const [method, op] of Object.entries(item as Record<string, Doc>)) {
      t.true(["get", "post"].includes(method), `${path} ${method}`);
      t.is(typeof op.operationId, "string");
      t.true(Object.keys(op.responses).length > 0);
      for (const [status, r] of Object.entries(op.responses as Record<string, Doc>)) {
        t.regex(status, /^[1-5]\d\d$/);
        t.is(typeof r.description, "string", `${path} ${status}`);
        for (const media of Object.values((r.content ?? {}) as Record<string, Doc>)) t.truthy(media.schema);
      }
      for (const p of op.parameters ?? []) {
        t.true(["query", "header", "path", "cookie"].includes(p.in));
        t.truthy(p.schema);
      }
    }
  }
});

test("every endpoint is documented, at the path the app mounts", (t) => {
  const d: Doc = buildOpenApi(version);
  t.deepEqual(Object.keys(d.paths).sort(), Object.values(API_PATHS).sort());
  t.is(API_PATHS.contactReceiver, `${RECEIVER_BASE_PATH}/contact`);
  t.is(API_PATHS.alertReceiver, `${RECEIVER_BASE_PATH}/alert`);
  t.is(API_OPERATIONS.length, 6);
  t.truthy(d.paths["/internal/sync/v1/status"].get.security);
  t.truthy(d.paths["/metrics"].get.responses["200"].content["text/plain; version=0.0.4; charset=utf-8"]);
  const receiver = d.paths["/bitrix/sync/webhook/contact"].post;
  t.deepEqual(
    receiver.parameters.map((p: Doc) => p.name),
    ["token", "ID"],
  );
  t.is(
    receiver.requestBody.content["application/x-www-form-urlencoded"].schema.$ref,
    "#/components/schemas/ContactRobotForm",
  );
});

test("every $ref resolves and no schema carries $schema or $id", (t) => {
  const d: Doc = buildOpenApi(version);
  const walk = (v: unknown, at: string) => {
    if (Array.isArray(v)) {
      for (const [i, x] of v.entries()) walk(x, `${at}/${i}`);
    } else if (v !== null && typeof v === "object") {
      for (const [k, x] of Object.entries(v)) {
        if (k === "$ref") {
          const m = /^#\/components\/schemas\/(.+)$/.exec(String(x));
          t.truthy(m && d.components.schemas[m[1] as string], `${at}: ${String(x)}`);
        }
        t.false(k === "$schema" || k === "$id", `${at}/${k}`);
        walk(x, `${at}/${k}`);
      }
    }
  };
  walk(d, "#");
});
