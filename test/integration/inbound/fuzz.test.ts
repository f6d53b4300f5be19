// Property-based fuzzing of the receivers (§18 matrix, issue 6): 10 000 generated requests per run,
// a mix of valid robot requests (with harmless variations), valid requests broken by one or two
// mutations, and random junk (test/helpers/receiver-requests.ts; `npm run fuzz:receiver` sends the
// same mix over real HTTP). Properties: never a 5xx; a valid request gets 200 and exactly one
// inbox row; any other request gets a 4xx and no row; no reply or log line carries a secret.
import test from "ava";
import fc from "fast-check";
import {
  ALERT_ENTITY_TYPE_ID,
  captureLogger,
  inboxCount,
  MEMBER_ID,
  makeApp,
  PORTAL_HOST,
  receiverConfigFor,
  setAlertEntityType,
  TOKENS,
} from "../../helpers/receiver.js";
import { type Contract, type Req, robotRequest, serialise } from "../../helpers/receiver-requests.js";
import { createTestDb, type TestDb } from "../../helpers/testdb.js";

const RUNS = Number(process.env.RECEIVER_FUZZ_RUNS ?? 10_000);

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
  await setAlertEntityType(db.pool, ALERT_ENTITY_TYPE_ID);
});
test.after.always(async () => {
  await db?.drop();
});

const CONTRACT: Contract = {
  tokens: TOKENS,
  portalHost: PORTAL_HOST,
  memberId: MEMBER_ID,
  alertEntityTypeId: ALERT_ENTITY_TYPE_ID,
};
const request = robotRequest(CONTRACT);

function toFetch(r: Req): { url: string; init: RequestInit } {
  const s = serialise(r);
  const headers: Record<string, string> = {};
  if (s.contentType !== undefined) headers["content-type"] = s.contentType;
  const init: RequestInit = { method: s.method, headers };
  if (s.body !== undefined) init.body = s.body;
  return { url: `http://localhost${s.path}`, init };
}

test("fuzz: no 5xx, one row per valid request, none per invalid one, no secret echoed", async (t) => {
  t.timeout(180_000);
  const captured = captureLogger("info");
  const app = makeApp(db.pool, captured.log, receiverConfigFor({ previous: true }));
  let rows = await inboxCount(db.pool);
  let requests = 0;
  let valid = 0;
  const statuses = new Map<number, number>();
  const started = Date.now();
  await fc.assert(
    fc.asyncProperty(request, async (r) => {
      const { url, init } = toFetch(r);
      const res = await app.request(url, init);
      const text = await res.text();
      requests++;
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      const now = await inboxCount(db.pool);
      const added = now - rows;
      rows = now;
      if (res.status >= 500) throw new Error(`5xx: ${res.status} ${text}`);
      for (const secret of [...Object.values(TOKENS), MEMBER_ID]) {
        if (text.includes(secret)) throw new Error("a reply echoed a secret");
      }
      if (r.valid) {
        valid++;
        if (res.status !== 200 || added !== 1) throw new Error(`valid request: ${res.status}, ${added} rows`);
      } else if (res.status < 400 || added !== 0) {
        throw new Error(`invalid request: ${res.status}, ${added} rows`);
      }
    }),
    { numRuns: RUNS },
  );
  t.log(
    `${requests} requests (${valid} valid) in ${((Date.now() - started) / 1000).toFixed(1)} s; statuses ${JSON.stringify(
      Object.fromEntries(statuses),
    )}`,
  );
  t.true(requests >= RUNS);
  t.true(valid > RUNS / 10, "the mix must contain a fair share of valid requests");
  t.true((statuses.get(403) ?? 0) > 0 && (statuses.get(400) ?? 0) > 0 && (statuses.get(415) ?? 0) > 0);
  const logs = captured.text();
  for (const secret of [...Object.values(TOKENS), MEMBER_ID, PORTAL_HOST]) {
    t.false(logs.toLowerCase().includes(secret.toLowerCase()), "logs must not carry request values");
  }
});
