// Bitrix24's published list of outbound addresses against the allow-list (src/config/published-networks.ts):
// what the file may hold, the difference network by network, and the allow-list a rendered file
// admits. The CLI around it (npm run render:nginx -- --published) runs in
// test/integration/inbound/nginx.test.ts.
import test from "ava";
import { parseCidrList } from "../../../src/config/cidr.js";
import { renderNginxFromEnv } from "../../../src/config/nginx.js";
import {
  formatNetworkDiff,
  networkDiff,
  parsePublishedNetworks,
  renderedAllowList,
} from "../../../src/config/published-networks.js";

const list = (text: string) => {
  const r = parseCidrList(text, { limitWidth: true });
  if (!r.ok) throw new Error(r.problems.join("; "));
  return r.cidrs;
};

test("a published list: addresses and networks, any separator, comments; bare addresses are hosts", (t) => {
  const r = parsePublishedNetworks(
    "# Bitrix24 cloud, outbound\n203.0.113.7\n198.51.100.0/24, 192.0.2.0/25;192.0.2.128/25\n\n2001:DB8:B24::/48  # v6\n2001:db8:b24:0::/48\n2001:db8::1\n",
  );
  if (!r.ok) return t.fail(r.problems.join("; "));
  t.deepEqual(
    r.cidrs.map((c) => c.text),
    [
      "203.0.113.7/32",
      "198.51.100.0/24",
      "192.0.2.0/25",
      "192.0.2.128/25",
      "2001:DB8:B24::/48",
      "2001:db8::1/128",
    ],
  );
  t.is(r.repeated, 1, "the same IPv6 network written twice is one");
});

test("a published list with anything else is refused, every problem with its line", (t) => {
  const r = parsePublishedNetworks(
    "203.0.113.0/24\nhttps://example.org\n10.0.0.1/8\n0.0.0.0/0\nbitrix24.example\n",
  );
  t.false(r.ok);
  const problems = r.ok ? [] : r.problems;
  t.is(problems.length, 4);
  t.is(problems[3], `line 5: "bitrix24.example" is not an IP address`);
  t.regex(problems[0] as string, /^line 2: "https:\/\/example\.org" is not address\/prefix$/);
  t.regex(problems[1] as string, /^line 3: .*host bits set/);
  t.regex(problems[2] as string, /^line 4: .*wider than \/8/);
  t.deepEqual(parsePublishedNetworks("# nothing here\n\n"), {
    ok: false,
    problems: ["the list holds no address or network"],
  });
});

test("the difference is network by network, whatever the spelling", (t) => {
  const d = networkDiff(
    list("203.0.113.0/24,2001:db8:b24::/48,192.0.2.0/24"),
    list("2001:DB8:B24:0::/48,198.51.100.0/24,192.0.2.0/25"),
  );
  t.deepEqual(
    d.added.map((c) => c.text),
    ["198.51.100.0/24", "192.0.2.0/25"],
  );
  t.deepEqual(
    d.removed.map((c) => c.text),
    ["203.0.113.0/24", "192.0.2.0/24"],
    "a narrower network replaces a wider one: both show",
  );
  t.deepEqual(
    d.kept.map((c) => c.text),
    ["2001:DB8:B24:0::/48"],
  );
  t.deepEqual(formatNetworkDiff(d, "a", "b"), [
    "allow-list: a -> b",
    "  + 198.51.100.0/24",
    "  + 192.0.2.0/25",
    "  - 203.0.113.0/24",
    "  - 192.0.2.0/24",
    "  2 added, 2 removed, 1 unchanged",
  ]);
  t.deepEqual(formatNetworkDiff(networkDiff(d.kept, d.kept), "a", "b"), [
    "allow-list: a -> b",
    "  no difference (1 network(s))",
  ]);
});

test("the allow-list of a rendered file is its allow lines, not the refusal pages' allow all", (t) => {
  const { text } = renderNginxFromEnv({
    SECRETS_SOURCE: "env",
    BITRIX_SYNC_NGINX_SERVER_NAME: "sync.example.invalid",
    BITRIX_WEBHOOK_ALLOWED_CIDRS: "203.0.113.0/24,2001:db8:b24::/48",
  });
  t.deepEqual(
    renderedAllowList(text).map((c) => c.text),
    ["203.0.113.0/24", "2001:db8:b24::/48"],
  );
});
