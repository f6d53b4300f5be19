// docs/security.md's roles section is rendered from the privilege catalogue
// (bitrix_sync.role_privileges); this keeps the file equal to the database, so the doc cannot drift
// from what sql/grants.sql applies. Fix a failure with `npm run docs:security`.
import { readFileSync } from "node:fs";
import test from "ava";
import { generatedSection, renderRolePrivileges, SECURITY_DOC } from "../../scripts/security-doc.js";
import { createTestDb, type TestDb } from "../helpers/testdb.js";

let db: TestDb;
test.before(async () => {
  db = await createTestDb();
});
test.after.always(async () => {
  await db?.drop();
});

test("docs/security.md lists exactly the privileges of bitrix_sync.role_privileges", async (t) => {
  const doc = readFileSync(SECURITY_DOC, "utf8");
  const rendered = await renderRolePrivileges(db.pool);
  t.true(rendered.includes("`bitrix_sync.perform_cutover(text)`"), "the catalogue was read");
  t.is(generatedSection(doc), rendered, "run npm run docs:security");
});

test("docs/security.md keeps the sections the HTTP half of issue 10 fills", (t) => {
  const doc = readFileSync(SECURITY_DOC, "utf8");
  for (const heading of ["## Tokens", "## Threat model of the public receivers"]) {
    t.true(doc.includes(`\n${heading}\n`), heading);
  }
});
