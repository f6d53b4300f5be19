import test from "ava";
import { cidrMatcher, parseCidr, parseCidrList } from "../../../src/config/cidr.js";

test("a network address with its prefix is accepted, in both families", (t) => {
  t.like(parseCidr(" 203.0.113.0/24 "), { text: "203.0.113.0/24", family: 4, prefix: 24 });
  t.like(parseCidr("127.0.0.2/32"), { family: 4, prefix: 32 });
  t.like(parseCidr("2001:db8:b24::/48"), { family: 6, prefix: 48 });
  t.like(parseCidr("::ffff:10.0.0.0/104"), { family: 6, prefix: 104 });
  t.like(parseCidr("0.0.0.0/0"), { family: 4, prefix: 0 }, "any width without the allow-list's rule");
  const allow = { limitWidth: true };
  t.like(parseCidr("10.0.0.0/8", allow), { family: 4, prefix: 8 });
  t.like(parseCidr("2001:db8::/32", allow), { family: 6, prefix: 32 });
  t.like(parseCidr("::ffff:10.0.0.0/104", allow), { family: 6, prefix: 104 });
});

test("the allow-list refuses a network wider than /8 (IPv4) or /32 (IPv6), IPv4 spelt as IPv6 too", (t) => {
  const allow = { limitWidth: true };
  for (const wide of ["0.0.0.0/0", "0.0.0.0/1", "128.0.0.0/1", "10.0.0.0/7", "8.0.0.0/5"]) {
    t.regex(
      parseCidr(wide, allow) as string,
      /is wider than \/8, the widest IPv4 network a list may hold/,
      wide,
    );
  }
  for (const wide of ["::/0", "2000::/3", "2001:db8::/31"]) {
    t.regex(
      parseCidr(wide, allow) as string,
      /is wider than \/32, the widest IPv6 network a list may hold/,
      wide,
    );
  }
  for (const mapped of ["::ffff:0.0.0.0/96", "::ffff:0:0/96", "::ffff:8.0.0.0/101", "::/32"]) {
    t.regex(parseCidr(mapped, allow) as string, /covers IPv4-mapped addresses wider than \/8/, mapped);
  }
  const list = parseCidrList("203.0.113.0/24, 0.0.0.0/0", allow);
  t.deepEqual(list, {
    ok: false,
    problems: [
      '"0.0.0.0/0" is wider than /8, the widest IPv4 network a list may hold: list the portal\'s own networks',
    ],
  });
});

test("host bits, missing or long prefixes and non-addresses are refused with a reason", (t) => {
  t.regex(parseCidr("10.0.0.1/24") as string, /host bits set/);
  t.regex(parseCidr("2001:db8::1/64") as string, /host bits set/);
  t.regex(parseCidr("::ffff:10.0.0.1/104") as string, /host bits set/);
  t.regex(parseCidr("10.0.0.0") as string, /not address\/prefix/);
  t.regex(parseCidr("10.0.0.0/33") as string, /prefix longer/);
  t.regex(parseCidr("2001:db8::/129") as string, /prefix longer/);
  t.regex(parseCidr("10.0.0.0/8/8") as string, /not address\/prefix/);
  t.regex(parseCidr("example.org/24") as string, /no valid IP/);
  t.regex(parseCidr("10.0.0.0/-1") as string, /not address\/prefix/);
});

test("a list: blank is empty; stray commas and duplicates are refused", (t) => {
  t.deepEqual(parseCidrList(undefined), { ok: true, cidrs: [] });
  t.deepEqual(parseCidrList("  "), { ok: true, cidrs: [] });
  const two = parseCidrList("203.0.113.0/24, 2001:db8::/32");
  t.true(two.ok && two.cidrs.length === 2);
  t.like(parseCidrList("10.0.0.0/8,"), { ok: false, problems: ["an empty entry (stray comma)"] });
  const dup = parseCidrList("10.0.0.0/8,10.0.0.0/8");
  t.false(dup.ok);
  t.regex(dup.ok ? "" : (dup.problems[0] as string), /listed twice/);
  // The same network written twice differently is still a duplicate.
  t.false(parseCidrList("2001:db8::/32,2001:0db8:0::/32").ok);
});

test("the matcher matches by prefix, unwraps IPv4-mapped addresses and refuses non-addresses", (t) => {
  const list = parseCidrList("127.0.0.1/32,10.1.0.0/16,2001:db8::/32");
  if (!list.ok) return t.fail();
  const m = cidrMatcher(list.cidrs);
  t.true(m("127.0.0.1"));
  t.true(m("::ffff:127.0.0.1"));
  t.false(m("127.0.0.2"));
  t.true(m("10.1.255.3"));
  t.false(m("10.2.0.1"));
  t.true(m("2001:db8:1::5"));
  t.false(m("2001:db9::1"));
  t.false(m("nonsense"));
  t.false(cidrMatcher([])("127.0.0.1"));
});
