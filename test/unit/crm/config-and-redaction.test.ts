import test from "ava";
import { isLoopbackHost, parseWebhookUrl } from "../../../src/crm/client.js";
import { CrmConfigError, CrmError } from "../../../src/crm/redact.js";
import { maskPii } from "../../../src/observability/redact.js";

const SECRET = "k3yAbCdEf0123456";

test("a valid https webhook URL on the portal host is accepted", (t) => {
  t.deepEqual(parseWebhookUrl(`https://han.bitrix24.ru/rest/17/${SECRET}/`, "han.bitrix24.ru"), {
    origin: "https://han.bitrix24.ru",
    basePath: `/rest/17/${SECRET}/`,
  });
  t.is(
    parseWebhookUrl(`https://HAN.bitrix24.ru/rest/17/${SECRET}`, "han.bitrix24.ru").basePath,
    `/rest/17/${SECRET}/`,
  );
});

test("plain http is allowed only for loopback hosts", (t) => {
  t.notThrows(() => parseWebhookUrl(`http://127.0.0.1:8123/rest/1/${SECRET}/`, "127.0.0.1:8123"));
  t.notThrows(() => parseWebhookUrl(`http://127.9.9.9:1/rest/1/${SECRET}/`, "127.9.9.9:1"));
  t.notThrows(() => parseWebhookUrl(`http://localhost:80/rest/1/${SECRET}/`, "localhost"));
  t.notThrows(() => parseWebhookUrl(`http://[::1]:8080/rest/1/${SECRET}/`, "[::1]:8080"));
  const e = t.throws(() => parseWebhookUrl(`http://han.bitrix24.ru/rest/1/${SECRET}/`, "han.bitrix24.ru"), {
    instanceOf: CrmConfigError,
  });
  t.regex(e.message, /must use https/);
  t.true(isLoopbackHost("127.0.0.1"));
  t.false(isLoopbackHost("127.0.0.256"));
  t.false(isLoopbackHost("128.0.0.1"));
  t.false(isLoopbackHost("localhost.evil.example"));
});

test("the URL host (with port) must equal BITRIX_SYNC_PORTAL_HOST", (t) => {
  const e = t.throws(() => parseWebhookUrl(`https://other.bitrix24.ru/rest/1/${SECRET}/`, "han.bitrix24.ru"));
  t.regex(e.message, /does not equal BITRIX_SYNC_PORTAL_HOST/);
  t.throws(() => parseWebhookUrl(`https://han.bitrix24.ru:8443/rest/1/${SECRET}/`, "han.bitrix24.ru"));
  t.notThrows(() =>
    parseWebhookUrl(`https://han.bitrix24.ru:8443/rest/1/${SECRET}/`, "han.bitrix24.ru:8443"),
  );
});

test("malformed webhook URLs are refused without echoing any part of them", (t) => {
  for (const url of [
    "not a url",
    `https://han.bitrix24.ru/rest/${SECRET}/`,
    `https://han.bitrix24.ru/rest/1/${SECRET}/crm.contact.add`,
    `https://han.bitrix24.ru/rest/1/${SECRET}/?x=1`,
    `https://user:${SECRET}@han.bitrix24.ru/rest/1/abc/`,
    `ftp://han.bitrix24.ru/rest/1/${SECRET}/`,
  ]) {
    const e = t.throws(() => parseWebhookUrl(url, "han.bitrix24.ru"), { instanceOf: CrmConfigError }, url);
    t.false(e.message.includes(SECRET), url);
    t.regex(e.message, /BITRIX_SYNC_CRM_REST_WEBHOOK_URL/);
  }
});

test("CrmError carries only kind, code, HTTP status and a plain Bitrix code", (t) => {
  const e = new CrmError({
    kind: "permanent",
    code: "credential_rejected",
    spendsAttempt: true,
    httpStatus: 401,
    bitrixError: "INVALID_CREDENTIALS",
  });
  t.is(
    e.message,
    "CRM call failed: kind=permanent code=credential_rejected http=401 bitrix=INVALID_CREDENTIALS",
  );
  t.is(e.kind, "permanent");
  t.is(e.code, "credential_rejected");
});

test("PII is masked to its first two and last two characters", (t) => {
  t.is(maskPii("+79991234567"), "+7********67");
  t.is(maskPii("ivan@example.com"), "iv************om");
  t.is(maskPii("Иван Петров"), "Ив*******ов");
  t.is(maskPii("abc"), "***");
});
