// Replicas of the real service for the chaos run: `node --import tsx src/main.ts` processes (what
// `npm start` runs) on one database and one portal, each with its own HTTP port, killed and started
// again by the fault injector. Every byte they print is kept for the personal-data check.
import { type ChildProcess, spawn } from "node:child_process";
import { projectRoot } from "../../src/local/project-root.js";

/** How long a replica may take from spawn to its HTTP listener before the run counts it as broken. */
const START_BOUND_MS = 60_000;

export interface ReplicaExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** From the signal sent to the exit; null when it exited without being told. */
  tookMs: number | null;
}

/** One replica slot: at most one process at a time, restarted in place. */
export class Replica {
  child: ChildProcess | null = null;
  port: number | null = null;
  /** Output of every process this slot ran, in order. */
  readonly output: string[] = [];
  starts = 0;
  private exited: Promise<ReplicaExit> | null = null;
  private signalledAt: number | null = null;
  /** Called when a process of this slot exits without having been signalled (a crash). */
  onUnaskedExit: ((exit: ReplicaExit, cause: string) => void) | null = null;

  constructor(
    readonly name: string,
    private readonly env: Record<string, string>,
    /** The release to run: a checkout of the project (the drills run an earlier one beside HEAD). */
    private readonly cwd: string = projectRoot,
  ) {}

  get running(): boolean {
    return this.child !== null;
  }

  /** Spawns the service and resolves when its HTTP listener is up. */
  async start(): Promise<void> {
    if (this.child) return;
    this.starts++;
    this.port = null;
    this.signalledAt = null;
    const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
      cwd: this.cwd,
      env: this.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child = child;
    let pending = "";
    const take = (d: Buffer) => {
      const text = d.toString("utf8");
      this.output.push(text);
      pending += text;
      const lines = pending.split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) {
        const m = /"event":"http\.listening","port":(\d+)/.exec(line);
        if (m) this.port = Number(m[1]);
      }
    };
    child.stdout?.on("data", take);
    child.stderr?.on("data", take);
    this.exited = new Promise<ReplicaExit>((resolve) =>
      child.on("exit", (code, signal) => {
        if (this.child === child) {
          this.child = null;
          this.port = null;
        }
        const exit = {
          code,
          signal,
          tookMs: this.signalledAt === null ? null : Date.now() - this.signalledAt,
        };
        // Only after startup: a replica that fails to start is retried by whoever started it.
        if (this.signalledAt === null && startedUp && this.onUnaskedExit)
          this.onUnaskedExit(exit, this.crashCause());
        resolve(exit);
      }),
    );
    let startedUp = false;
    const end = Date.now() + START_BOUND_MS;
    while (this.port === null) {
      if (this.child !== child) {
        // The startup error lines (src/startup/errors.ts) name the cause and never a secret.
        const why = this.text()
          .split("\n")
          .filter(
            (l) => l.startsWith("bitrix-sync:") || l.includes('"level":"fatal"') || l.includes('"level":60'),
          )
          .slice(-3)
          .join(" | ");
        throw new Error(`${this.name} exited during startup: ${why}`);
      }
      if (Date.now() > end) throw new Error(`${this.name} did not listen within ${START_BOUND_MS} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
    startedUp = true;
  }

  /** The event and error class of the last crash line this slot printed (never a message). */
  private crashCause(): string {
    const lines = this.text()
      .split("\n")
      .filter((l) => l.includes('"event":"process.crash"'));
    const last = lines.at(-1);
    if (!last) return "no crash line";
    const kind = /"kind":"([A-Za-z]+)"/.exec(last)?.[1] ?? "?";
    const name = /"errorName":"([A-Za-z]+)"/.exec(last)?.[1] ?? "?";
    return `${kind} ${name}`;
  }

  /** Sends `signal` and waits for the exit. */
  async stop(signal: "SIGKILL" | "SIGTERM"): Promise<ReplicaExit | null> {
    const child = this.child;
    const exited = this.exited;
    if (!child || !exited) return null;
    this.signalledAt = Date.now();
    child.kill(signal);
    return await exited;
  }

  /** The whole output of this slot. */
  text(): string {
    return this.output.join("");
  }
}
