// Bitrix24's published list of the addresses its cloud calls out from, against the robots'
// allow-list (§10.1, §16; docs/deployment.md, "When Bitrix24's addresses change"). The operator
// downloads the list from Bitrix24's own documentation (its helpdesk publishes the outbound IP
// addresses and networks of the cloud, per region) into a file; `npm run render:nginx -- --published
// <file>` reads it here, shows which networks it adds to and removes from the current allow-list,
// and renders with it, or with --check only shows that. Nothing is fetched: the file is what was
// reviewed. The list's entries pass the same rules as BITRIX_WEBHOOK_ALLOWED_CIDRS (src/config/cidr.ts).
import { type Cidr, cidrKey, parseCidr } from "./cidr.js";

/**
 * Reads a published list: addresses or networks separated by white space, commas or semicolons,
 * one or more a line; `#` starts a comment. A bare address is its own /32 (IPv4) or /128 (IPv6).
 * Repeated networks are kept once. Returns the networks in the file's order, or every problem with
 * its line number.
 */
export function parsePublishedNetworks(
  text: string,
): { ok: true; cidrs: Cidr[]; repeated: number } | { ok: false; problems: string[] } {
  const cidrs: Cidr[] = [];
  const problems: string[] = [];
  const seen = new Set<string>();
  let repeated = 0;
  text.split(/\r?\n/).forEach((raw, i) => {
    const line = raw.replace(/#.*$/, "");
    for (const token of line.split(/[\s,;]+/).filter((t) => t !== "")) {
      const bare = !token.includes("/");
      const written = bare ? `${token}/${token.includes(":") ? 128 : 32}` : token;
      const c = parseCidr(written, { limitWidth: true });
      if (typeof c === "string") {
        problems.push(`line ${i + 1}: ${bare ? `${JSON.stringify(token)} is not an IP address` : c}`);
        continue;
      }
      const key = cidrKey(c);
      if (seen.has(key)) {
        repeated++;
        continue;
      }
      seen.add(key);
      cidrs.push(c);
    }
  });
  if (problems.length > 0) return { ok: false, problems };
  if (cidrs.length === 0) return { ok: false, problems: ["the list holds no address or network"] };
  return { ok: true, cidrs, repeated };
}

export interface NetworkDiff {
  added: Cidr[];
  removed: Cidr[];
  kept: Cidr[];
}

/** What `next` adds to and removes from `current`, network by network (not address by address). */
export function networkDiff(current: readonly Cidr[], next: readonly Cidr[]): NetworkDiff {
  const had = new Set(current.map(cidrKey));
  const has = new Set(next.map(cidrKey));
  return {
    added: next.filter((c) => !had.has(cidrKey(c))),
    removed: current.filter((c) => !has.has(cidrKey(c))),
    kept: next.filter((c) => had.has(cidrKey(c))),
  };
}

/** The allow-list of a rendered server block (its `allow` lines; `allow all` is the refusal pages'). */
export function renderedAllowList(text: string): Cidr[] {
  const out: Cidr[] = [];
  for (const m of text.matchAll(/^ {2}allow (\S+);$/gm)) {
    const c = parseCidr(m[1] as string);
    if (typeof c !== "string") out.push(c);
  }
  return out;
}

/** The difference as lines for a person: `+` added, `-` removed, and how many stay. */
export function formatNetworkDiff(d: NetworkDiff, from: string, to: string): string[] {
  const lines = [`allow-list: ${from} -> ${to}`];
  for (const c of d.added) lines.push(`  + ${c.text}`);
  for (const c of d.removed) lines.push(`  - ${c.text}`);
  lines.push(
    d.added.length + d.removed.length === 0
      ? `  no difference (${d.kept.length} network(s))`
      : `  ${d.added.length} added, ${d.removed.length} removed, ${d.kept.length} unchanged`,
  );
  return lines;
}
