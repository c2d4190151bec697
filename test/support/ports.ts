/**
 * Ports handed to test servers, claimed across every test process on the machine: ava
 * runs files in several processes at once, and two of them could otherwise pick the same
 * port between one's probe and its server's listen (seen in CI: EADDRINUSE on a first
 * start). A claim is a file named after the port, under the temp dir, holding the
 * claimer's pid; the claim of a process that has exited is taken over, and this
 * process's claims are removed when it exits. A port is handed out once per process.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const CLAIMS = path.join(os.tmpdir(), 'quiver-test-ports');
/** Ports this process has claimed (and the ports it tried that another process held). */
const seen = new Set<number>();
const files: string[] = [];

/** Whether process `pid` is alive (EPERM: alive, owned by someone else). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Claims `port` for this process; false when this or another live test process has it. */
export function claimPort(port: number): boolean {
  if (seen.has(port)) return false;
  seen.add(port);
  fs.mkdirSync(CLAIMS, { recursive: true });
  const file = path.join(CLAIMS, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      fs.writeFileSync(file, String(process.pid), { flag: 'wx' });
      if (files.length === 0) {
        process.once('exit', () => {
          for (const f of files) fs.rmSync(f, { force: true });
        });
      }
      files.push(file);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let owner = NaN;
      try {
        owner = Number(fs.readFileSync(file, 'utf8'));
      } catch {
        continue; // removed meanwhile: try again
      }
      // An empty file is a claim being written right now.
      if (!Number.isInteger(owner) || owner <= 0 || alive(owner)) return false;
      fs.rmSync(file, { force: true });
    }
  }
  return false;
}
