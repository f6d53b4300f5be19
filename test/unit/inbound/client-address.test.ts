import test from "ava";
import { cidrMatcher, parseCidrList } from "../../../src/config/cidr.js";
import { clientAddress } from "../../../src/inbound/client-address.js";

const list = parseCidrList("127.0.0.1/32,fd00::/8");
const trusted = cidrMatcher(list.ok ? list.cidrs : []);

test("a trusted proxy's X-Real-IP is the client's address", (t) => {
  t.is(clientAddress("127.0.0.1", "203.0.113.9", trusted), "203.0.113.9");
  t.is(clientAddress("fd00::10", "2001:db8::7", trusted), "2001:db8::7");
  t.is(clientAddress("127.0.0.1", " ::ffff:203.0.113.9 ", trusted), "203.0.113.9");
});

test("from any other peer the header is ignored and the peer is the address", (t) => {
  t.is(clientAddress("127.0.0.3", "203.0.113.9", trusted), "127.0.0.3");
  t.is(clientAddress("203.0.113.9", "127.0.0.1", trusted), "203.0.113.9");
  t.is(clientAddress("127.0.0.1", "203.0.113.9", cidrMatcher([])), "127.0.0.1", "trust nobody by default");
});

test("a trusted proxy without a single valid address in the header leaves the peer", (t) => {
  t.is(clientAddress("127.0.0.1", undefined, trusted), "127.0.0.1");
  t.is(clientAddress("127.0.0.1", "", trusted), "127.0.0.1");
  t.is(clientAddress("127.0.0.1", "203.0.113.9, 198.51.100.1", trusted), "127.0.0.1");
  t.is(clientAddress("127.0.0.1", "unknown", trusted), "127.0.0.1");
  t.is(clientAddress(null, "203.0.113.9", trusted), null);
});
