import { createHash } from "node:crypto";

/** SHA-256 hex of a value, for snapshots and fingerprints: comparable, not readable. Null stays null. */
export function sha256(value: string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  return createHash("sha256").update(value, "utf8").digest("hex");
}

/** SHA-256 hex of a JSON value with sorted keys (stable across key order). */
export function stableHash(value: unknown): string {
  return createHash("sha256").update(stableJson(value), "utf8").digest("hex");
}

function stableJson(v: unknown): string {
  if (v === null || typeof v !== "object") return JSON.stringify(v) ?? "null";
  if (Array.isArray(v)) return `[${v.map(stableJson).join(",")}]`;
  const keys = Object.keys(v as Record<string, unknown>).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${stableJson((v as Record<string, unknown>)[k])}`).join(",")}}`;
}
