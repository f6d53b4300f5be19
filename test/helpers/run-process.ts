// Runs a command of the project (npm run ..., node --import tsx src/main.ts) as a child process with
// exactly the environment given, and collects its exit code and output. A deadline stops it (SIGTERM,
// then SIGKILL), so a hanging child fails the test instead of the run.
import { spawn } from "node:child_process";
import { projectRoot } from "../../src/local/project-root.js";

export interface ProcessResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** True when the deadline killed it. */
  timedOut: boolean;
}

/** A minimal environment: PATH and HOME plus `vars`; nothing of the developer's configuration. */
export function cleanEnv(vars: Record<string, string>): Record<string, string> {
  return { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", ...vars };
}

export async function runProcess(
  command: string,
  args: string[],
  env: Record<string, string>,
  timeoutMs: number,
  as?: { uid: number; gid: number },
): Promise<ProcessResult> {
  const child = spawn(command, args, { cwd: projectRoot, env, stdio: ["ignore", "pipe", "pipe"], ...as });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => {
    stdout += d.toString("utf8");
  });
  child.stderr.on("data", (d: Buffer) => {
    stderr += d.toString("utf8");
  });
  let timedOut = false;
  let killer: NodeJS.Timeout | undefined;
  // SIGTERM first, so a script that started processes of its own (replicas, a database) stops them;
  // SIGKILL if it has not ended 15 s later.
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill("SIGTERM");
    killer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  }, timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
  clearTimeout(timer);
  clearTimeout(killer);
  return { code, stdout, stderr, timedOut };
}

/** `node --import tsx src/main.ts`, i.e. `npm start` without npm's banner. */
export function runService(
  env: Record<string, string>,
  opts: { timeoutMs?: number; as?: { uid: number; gid: number } } = {},
): Promise<ProcessResult> {
  return runProcess(
    process.execPath,
    ["--import", "tsx", "src/main.ts"],
    env,
    opts.timeoutMs ?? 60_000,
    opts.as,
  );
}

/** What a script of the project (a drill, the chaos suite) printed, and the figures of its result line. */
export interface ScriptRun extends ProcessResult {
  /** stdout, then stderr. */
  out: string;
  /** The figures of the `<prefix> {json}` line, or {} when none was printed. */
  // biome-ignore lint/suspicious/noExplicitAny: the figures are whatever JSON the script printed; each test reads its own
  result: Record<string, any>;
  /** Whether the result line was printed. */
  printed: boolean;
}

/**
 * Runs a script as an operator does (`node --import tsx <script> <args>`, a bare environment plus
 * `env`) and reads the one `<resultPrefix> {json}` line it prints with its figures (`DRILL_RESULT`,
 * `CHAOS_RESULT`). On a failure, or without that line, the last 60 lines of its output go to the
 * test's log.
 */
export async function runScript(
  t: { log: (...values: unknown[]) => void },
  script: string,
  opts: { args?: string[]; env?: Record<string, string>; resultPrefix: string; timeoutMs: number },
): Promise<ScriptRun> {
  const r = await runProcess(
    process.execPath,
    ["--import", "tsx", script, ...(opts.args ?? [])],
    cleanEnv(opts.env ?? {}),
    opts.timeoutMs,
  );
  const out = r.stdout + r.stderr;
  const prefix = `${opts.resultPrefix} `;
  const line = r.stdout.split("\n").find((l) => l.startsWith(prefix));
  if (r.code !== 0 || !line) {
    // The failed checks first (a drill prints them far above its last lines), then the tail.
    const lines = out.split("\n");
    const failed = lines.filter((l) => /^ {2}FAIL /.test(l) || /^ {9}- /.test(l)).slice(0, 40);
    t.log([...failed, ...(failed.length > 0 ? ["  ..."] : []), ...lines.slice(-60)].join("\n"));
  }
  return {
    ...r,
    out,
    result: line ? JSON.parse(line.slice(prefix.length)) : {},
    printed: line !== undefined,
  };
}
