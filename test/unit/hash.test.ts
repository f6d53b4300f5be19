// The keyed hashes over personal data (src/hash.ts): labelled by field, in the v3 form; the v2 and
// plain SHA-256 forms of older rows still recognised; the alert fingerprint independent of the key.
import test from "ava";
import { alertFingerprint } from "../../src/alerts/raise.js";
import {
  CLEARED_HASH,
  configureHashKey,
  contentHash,
  isLegacyHash,
  isUnkeyedHash,
  legacySha256,
  legacyV2Hash,
  matchesPiiHash,
  piiHash,
} from "../../src/hash.js";

test.before(() => configureHashKey("unit-test-hash-key-3f9a1c7e5b2d4f6a8c0e"));

test("a value hashed as two fields gives two hashes: the field is part of the input", (t) => {
  const same = "ivan@example.org";
  const hashes = new Set([piiHash("name", same), piiHash("email", same), piiHash("phone", same)]);
  t.is(hashes.size, 3);
  t.not(contentHash(same), piiHash("name", JSON.stringify(same)), "content is labelled too");
  for (const h of hashes) t.regex(h ?? "", /^v3:[A-Za-z0-9_-]{43}$/);
  t.is(piiHash("phone", null), null);
  t.is(piiHash("phone", "+79161234567"), piiHash("phone", "+79161234567"), "stable");
});

test("every stored form is recognised for its value: v3 of its field, v2 and plain SHA-256 as legacy", (t) => {
  const phone = "+79161234567";
  const v3 = piiHash("phone", phone);
  const v2 = legacyV2Hash(phone);
  const hex = legacySha256(phone);
  t.true(matchesPiiHash(v3, "phone", phone));
  t.false(matchesPiiHash(v3, "name", phone), "a v3 hash is of one field only");
  t.true(matchesPiiHash(v2, "phone", phone));
  t.true(matchesPiiHash(hex, "phone", phone));
  t.false(matchesPiiHash(v2, "phone", "+79161234568"));
  t.false(matchesPiiHash(CLEARED_HASH, "phone", phone), "a cleared hash matches nothing");
  t.true(matchesPiiHash(null, "email", null));
  t.false(matchesPiiHash(null, "email", "a@b.c"));
  t.deepEqual(
    [v3, v2, hex, CLEARED_HASH, null].map((h) => [isLegacyHash(h), isUnkeyedHash(h)]),
    [
      [false, false],
      [true, false],
      [true, true],
      [false, false],
      [false, false],
    ],
  );
});

test("the alert fingerprint does not depend on the hash key: a key change never opens a second alert", (t) => {
  const conflict = {
    type: "duplicate_contacts" as const,
    userId: "7c0c6a52-4c59-4c44-9c47-c1b3b4b0a001",
    candidates: [12, 7],
  };
  const before = alertFingerprint(conflict);
  configureHashKey("another-unit-test-key-0b1d3f5a7c9e2d4f6a8c");
  t.is(alertFingerprint(conflict), before);
  t.regex(before, /^[0-9a-f]{64}$/, "the form business_alerts.fingerprint accepts");
  configureHashKey("unit-test-hash-key-3f9a1c7e5b2d4f6a8c0e");
});
