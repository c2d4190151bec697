/**
 * The node's log destination (ts/api/cli/log-sink.ts): the lines of one event-loop turn
 * leave together at the turn's end, in order; a WARN line leaves at once; none is lost
 * when the process exits in the same turn, or when an exit handler logs; a reader that
 * stops taking lines does not block the event loop, and gets every line, whole and in
 * order, once it reads again.
 */
import test from 'ava';
import { execFileSync, spawn } from 'node:child_process';
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

  sink.write('{"level":30,"msg":"info"}\n');
  sink.write('{"level":40,"msg":"warn"}\n');
  t.true(fs.readFileSync(file, 'utf8').endsWith('{"level":30,"msg":"info"}\n{"level":40,"msg":"warn"}\n'), 'a WARN line leaves at once, after the lines queued before it');
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

test('a reader that stops taking lines does not block the event loop; it gets every line, whole and in order, when it reads again', async (t) => {
  const script = `
    const { TurnBatchedSink } = require(${JSON.stringify(SINK)});
    process.stdout; // standard output set up as Node does it: a pipe in non-blocking mode
    const sink = new TurnBatchedSink(1);
    const pad = 'p'.repeat(1000);
    for (let i = 0; i < 3000; i++) sink.write(JSON.stringify({ level: 30, i, pad }) + '\\n');
    sink.flush();
    // The next turn comes though the reader has taken almost nothing of 3 MB: the rest waits in the sink.
    setImmediate(() => process.stderr.write(sink.tail !== null ? 'turn, bytes waiting\\n' : 'turn, nothing waiting\\n'));
  `;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.pause();
  let err = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr.on('data', (c: Buffer) => {
      err += c.toString();
      if (err.includes('\n')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`child exited (${code}) before its next turn: ${err}`)));
  });
  t.is(err, 'turn, bytes waiting\n', 'the event loop went on while the reader took nothing');
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stdout.resume();
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  t.is(code, 0, err);
  const lines = out.split('\n').filter((l) => l !== '');
  t.is(lines.length, 3000);
  lines.forEach((l, i) => {
    if ((JSON.parse(l) as { i: number }).i !== i) t.fail(`line ${i} out of order or cut: ${l.slice(0, 80)}`);
  });
});
