// CIDR lists in the configuration: the robots' allow-list that nginx applies (§10.1) and the proxies
// whose forwarded client address the service believes. A list is comma-separated; empty means none.
// Host bits must be zero and entries distinct, so the reviewed text says exactly what it allows, and
// no entry of the allow-list is wider than /8 (IPv4) or /32 (IPv6): it names a portal's networks,
// not half the internet.
import { BlockList, isIP } from "node:net";

export interface Cidr {
  /** The text as written, trimmed (already canonical: host bits are zero). */
  text: string;
  family: 4 | 6;
  address: string;
  prefix: number;
}

/** 16-bit groups of an IPv6 address (with an optional dotted IPv4 tail), or undefined. */
function ipv6Groups(address: string): number[] | undefined {
  let s = address;
  const lastColon = s.lastIndexOf(":");
  const tail = s.slice(lastColon + 1);
  if (tail.includes(".")) {
    // `::ffff:192.0.2.1` is `::ffff:c000:201`.
    const o = ipv4Octets(tail);
    if (!o) return undefined;
    const hi = (((o[0] as number) << 8) | (o[1] as number)).toString(16);
    const lo = (((o[2] as number) << 8) | (o[3] as number)).toString(16);
    s = `${s.slice(0, lastColon + 1)}${hi}:${lo}`;
  }
  const halves = s.split("::");
  if (halves.length > 2) return undefined;
  const part = (h: string | undefined) => (h ? h.split(":").map((g) => Number.parseInt(g, 16)) : []);
  const head = part(halves[0]);
  const rest = part(halves[1]);
  const fill = 8 - head.length - rest.length;
  if (halves.length === 1 ? fill !== 0 : fill < 1) return undefined;
  const groups = [...head, ...new Array<number>(halves.length === 1 ? 0 : fill).fill(0), ...rest];
  return groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : undefined;
}

function ipv4Octets(address: string): number[] | undefined {
  const parts = address.split(".");
  if (parts.length !== 4 || !parts.every((p) => /^\d{1,3}$/.test(p))) return undefined;
  const octets = parts.map(Number);
  return octets.every((o) => o <= 255) ? octets : undefined;
}

/** The address as bits, most significant first. */
function addressBits(address: string, family: 4 | 6): number[] | undefined {
  const words = family === 4 ? ipv4Octets(address) : ipv6Groups(address);
  const width = family === 4 ? 8 : 16;
  if (!words) return undefined;
  return words.flatMap((w) => Array.from({ length: width }, (_, i) => (w >> (width - 1 - i)) & 1));
}

export interface CidrRules {
  /**
   * Refuse networks wider than MIN_PREFIX (the robots' allow-list: it names a portal's networks).
   * The trusted proxies may be a private range of any size.
   */
  limitWidth?: boolean;
}

/** Parses `address/prefix`. Returns an error sentence instead of throwing. */
export function parseCidr(text: string, rules: CidrRules = {}): Cidr | string {
  const s = text.trim();
  const [address, prefix, extra] = s.split("/");
  if (!address || prefix === undefined || extra !== undefined || !/^\d{1,3}$/.test(prefix)) {
    return `${JSON.stringify(s)} is not address/prefix`;
  }
  const v = isIP(address);
  if (v === 0) return `${JSON.stringify(s)} has no valid IP address`;
  const family = v as 4 | 6;
  const bits = Number(prefix);
  if (bits > (family === 4 ? 32 : 128)) return `${JSON.stringify(s)} has a prefix longer than the address`;
  const all = addressBits(address, family);
  if (!all) return `${JSON.stringify(s)} has no valid IP address`;
  if (all.slice(bits).some((b) => b === 1)) {
    return `${JSON.stringify(s)} has host bits set after /${bits}: write the network address`;
  }
  const tooWide = rules.limitWidth ? widerThanAllowed(all, family, bits) : null;
  if (tooWide) return `${JSON.stringify(s)} ${tooWide}`;
  return { text: s, family, address, prefix: bits };
}

/** The widest prefix a list may hold: an allow-list names a portal's networks, not a share of the internet. */
const MIN_PREFIX = { 4: 8, 6: 32 } as const;

/** ::ffff:0:0/96, where IPv6 spells IPv4 addresses (nginx and the matcher treat them as IPv4). */
const MAPPED = [...new Array<number>(80).fill(0), ...new Array<number>(16).fill(1)];

/** Why the network is too wide for a list, or null. */
function widerThanAllowed(bits: number[], family: 4 | 6, prefix: number): string | null {
  if (prefix < MIN_PREFIX[family]) {
    return `is wider than /${MIN_PREFIX[family]}, the widest ${family === 4 ? "IPv4" : "IPv6"} network a list may hold: list the portal's own networks`;
  }
  // An IPv6 network reaching into the IPv4-mapped range is an IPv4 network in disguise: the same
  // /8 applies to the IPv4 part (::ffff:10.0.0.0/104 is 10.0.0.0/8).
  const shared = Math.min(prefix, 96);
  if (family === 6 && bits.slice(0, shared).every((b, i) => b === MAPPED[i]) && prefix < 96 + MIN_PREFIX[4]) {
    return `covers IPv4-mapped addresses wider than /${MIN_PREFIX[4]} (::ffff:0:0/96 spells IPv4): list the portal's own networks`;
  }
  return null;
}

/**
 * Parses a comma-separated list. Blank or whitespace-only text is the empty list. Returns the
 * entries or the list of problems.
 */
export function parseCidrList(
  text: string | undefined,
  rules: CidrRules = {},
): { ok: true; cidrs: Cidr[] } | { ok: false; problems: string[] } {
  if (text === undefined || text.trim() === "") return { ok: true, cidrs: [] };
  const cidrs: Cidr[] = [];
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const item of text.split(",")) {
    const c = parseCidr(item, rules);
    if (typeof c === "string") {
      problems.push(item.trim() === "" ? "an empty entry (stray comma)" : c);
      continue;
    }
    const key = cidrKey(c);
    if (seen.has(key)) problems.push(`${JSON.stringify(c.text)} is listed twice`);
    seen.add(key);
    cidrs.push(c);
  }
  return problems.length > 0 ? { ok: false, problems } : { ok: true, cidrs };
}

/** The network itself, however it was written (`2001:DB8::/32` and `2001:db8:0::/32` are one). */
export function cidrKey(c: Cidr): string {
  return `${c.family}:${addressBits(c.address, c.family)?.slice(0, c.prefix).join("")}/${c.prefix}`;
}

/** A matcher for addresses in any of the CIDRs. IPv4-mapped IPv6 addresses match their IPv4 form. */
export function cidrMatcher(cidrs: readonly Cidr[]): (address: string) => boolean {
  const list = new BlockList();
  for (const c of cidrs) list.addSubnet(c.address, c.prefix, c.family === 4 ? "ipv4" : "ipv6");
  return (address) => {
    const plain = address.startsWith("::ffff:") && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
    const v = isIP(plain);
    if (v === 0) return false;
    return list.check(plain, v === 4 ? "ipv4" : "ipv6");
  };
}
