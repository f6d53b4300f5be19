// The service's status view (GET /internal/sync/v1/status, §14) in one line: readiness and the
// backlog counts. The document holds counts and codes only, so the line does too.
import type { ServiceFile } from "../../src/local/service-file.js";
import { serviceBase } from "./service.js";
import { DemoError } from "./wait.js";

type Row = Record<string, unknown>;

function counts(rows: unknown, label: (r: Row) => string, n: (r: Row) => unknown = (r) => r.count): string {
  const list = Array.isArray(rows) ? (rows as Row[]) : [];
  return list.length === 0 ? "none" : list.map((r) => `${label(r)} ${String(n(r))}`).join(", ");
}

export async function statusLine(f: ServiceFile, token: string): Promise<string> {
  const res = await fetch(`${serviceBase(f)}/internal/sync/v1/status`, {
    headers: { authorization: `Bearer ${token}` },
    signal: AbortSignal.timeout(10_000),
  });
  if (res.status !== 200) throw new DemoError(`the status view answered HTTP ${res.status}`);
  const s = (await res.json()) as Row;
  const readiness = s.readiness as { status?: string; problems?: string[] } | undefined;
  const problems = readiness?.problems?.length ? ` (${readiness.problems.join(", ")})` : "";
  return [
    `${readiness?.status ?? "unknown"}${problems}`,
    `queue: ${counts(s.queue, (r) => String(r.status))}`,
    `active workflows: ${counts(s.workflows, (r) => `${r.workflow_type} ${r.state}`)}`,
    `webhook backlog: ${counts(s.webhooks, (r) => `${r.receiver} ${r.status}`)}`,
    `dead letters: ${counts(s.dead_letters, (r) => `${r.operation} ${r.error_code}`)}`,
    `open alerts: ${counts(
      s.business_alerts,
      (r) => String(r.alert_type),
      (r) => r.open_count,
    )}`,
  ].join(" · ");
}
