// The build a signal names (src/version.ts): decided from the image's build arguments, else the
// checkout, else `unknown`; never anything that could not be a version or a commit (both become
// metric labels).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { buildValue, gitRevision, resolveRevision, resolveVersion } from "../../src/version.js";

test("the image's BITRIX_SYNC_REVISION wins over the checkout; without either the revision is unknown", (t) => {
  const sha = "0123456789abcdef0123456789abcdef01234567";
  t.is(
    resolveRevision({ BITRIX_SYNC_REVISION: sha }, () => "f".repeat(40)),
    sha,
  );
  t.is(
    resolveRevision({}, () => "f".repeat(40)),
    "f".repeat(40),
  );
  t.is(
    resolveRevision({ BITRIX_SYNC_REVISION: "  " }, () => null),
    "unknown",
  );
  t.is(
    resolveRevision({}, () => null),
    "unknown",
  );
});

test("the version is package.json's unless BITRIX_SYNC_VERSION says otherwise", (t) => {
  t.regex(resolveVersion({}), /^\d+\.\d+\.\d+/);
  t.is(resolveVersion({ BITRIX_SYNC_VERSION: "1.4.0-rc.2" }), "1.4.0-rc.2");
  t.is(resolveVersion({ BITRIX_SYNC_VERSION: "" }), resolveVersion({}));
});

test("anything that is not a version or a commit becomes unknown", (t) => {
  for (const bad of ['1.0"} evil', "a b", "x".repeat(65), "-leading", "ümlaut", "{{version}}"]) {
    t.is(buildValue(bad), "unknown", bad);
  }
  for (const good of [
    "0.1.0",
    "v2.3.4+build.7",
    "main-2024_01",
    "0123456789abcdef0123456789abcdef01234567",
  ]) {
    t.is(buildValue(good), good);
  }
});

test("outside a git tree (the image), git gives no revision and nothing throws", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-nogit-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  t.is(gitRevision(dir), null);
  // In this checkout it is the HEAD commit.
  t.regex(gitRevision() ?? "not a checkout", /^([0-9a-f]{40}|not a checkout)$/);
});
