/**
 * Scratch directories of one test file: made under the OS temp dir with a prefix, and
 * all removed when the file's tests are done (also when one failed), so `make test`
 * leaves nothing behind in /tmp.
 */
import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** Call once at a test file's top level: the returned function makes one directory per call. */
export function scratchDirs(prefix: string): () => string {
  const made: string[] = [];
  test.after.always(`remove the ${prefix}* scratch directories`, () => {
    for (const dir of made) fs.rmSync(dir, { recursive: true, force: true });
  });
  return () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    made.push(dir);
    return dir;
  };
}
