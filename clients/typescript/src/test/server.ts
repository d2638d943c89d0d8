/** Start the real admission-authority binary on a free loopback port for a test. */

import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { createServer } from "node:net";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

export interface Server {
  addr: string;
  pid: number;
  stop(): Promise<void>;
  /** SIGKILL, as an OOM kill or a lost node would. */
  kill(): Promise<void>;
}

/** `$ADMISSION_BIN` (the test command sets it), else the repo's debug build; on 127.0.0.1
 * port 0 unless `args` say `--listen`. */
export async function startServer(...args: string[]): Promise<Server> {
  const bin = process.env.ADMISSION_BIN ?? resolve(repo, "target/debug/admission-authority");
  const listen = args.includes("--listen") ? [] : ["--listen", "127.0.0.1:0"];
  const child: ChildProcess = spawn(bin, ["serve", ...listen, ...args], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, RUST_LOG: "warn" },
  });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await once(lines, "line")) as [string];
  if (!line.startsWith("listening on ")) throw new Error(`unexpected first line: ${line}`);
  return {
    addr: line.slice("listening on ".length).trim(),
    pid: child.pid!,
    async stop() {
      lines.close();
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      await once(child, "exit");
    },
    async kill() {
      lines.close();
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGKILL");
      await once(child, "exit");
    },
  };
}

/** Poll `check` until it is true, or fail after `deadlineMs`. */
export async function eventually(
  what: string,
  check: () => Promise<boolean>,
  deadlineMs = 5000,
): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A loopback port free at the time of asking. */
export async function freePort(): Promise<number> {
  const srv = createServer();
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  const port = (srv.address() as { port: number }).port;
  srv.close();
  await once(srv, "close");
  return port;
}
