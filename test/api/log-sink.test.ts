/**
 * The node's log destination (ts/api/cli/log-sink.ts): the lines of one event-loop turn
 * leave together at the turn's end, in order, and none is lost when the process exits
 * in the same turn, or when an exit handler logs.
 */
import test from 'ava';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { TurnBatchedSink } from '../../ts/api/cli/log-sink';

const SINK = path.join(__dirname, '..', '..', 'ts', 'api', 'cli', 'log-sink.js');

test('lines of one turn are written together at its end, in order; a turn with more than 64 KiB writes at once', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-log-sink-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'out');
  const fd = fs.openSync(file, 'w');
  t.teardown(() => fs.closeSync(fd));
  const sink = new TurnBatchedSink(fd);
  for (let i = 0; i < 5; i++) sink.write(`line ${i}\n`);
  t.is(fs.readFileSync(file, 'utf8'), '', 'nothing is written before the turn ends');
  await new Promise<void>((resolve) => setImmediate(resolve));
  t.is(fs.readFileSync(file, 'utf8'), '0 1 2 3 4'.split(' ').map((i) => `line ${i}\n`).join(''));

  const big = 'x'.repeat(1023) + '\n';
  for (let i = 0; i < 64; i++) sink.write(big);
  t.is(fs.statSync(file).size, 5 * 7 + 64 * 1024, 'a full queue is written in the same turn');
  sink.write('é\n');
  await new Promise<void>((resolve) => setImmediate(resolve));
  t.true(fs.readFileSync(file, 'utf8').endsWith(big + 'é\n'), 'text is written as UTF-8');
});

test('a process that exits in the turn it logs, and one whose exit handler logs, lose no line', (t) => {
  const script = `
    const { TurnBatchedSink } = require(${JSON.stringify(SINK)});
    const sink = new TurnBatchedSink(1);
    process.on('exit', () => sink.write('from an exit handler\\n'));
    sink.write('first\\n');
    sink.write('second\\n');
    process.exit(3);
  `;
  let out = '';
  try {
    execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' });
  } catch (err) {
    t.is((err as { status: number }).status, 3);
    out = (err as { stdout: string }).stdout;
  }
  t.is(out, 'first\nsecond\nfrom an exit handler\n');
});
