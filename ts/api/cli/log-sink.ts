/**
 * Where the node's log lines go: standard output, the lines of one event-loop turn in
 * one write(2).
 *
 * A node at the default level (INFO) writes a request line per request; one write(2)
 * per line was about 5% of the event-loop samples of a peer answering queries (a CPU
 * profile by hand; the cluster A/B is in docs/replication.md, "Limits, known"). Here a
 * line is queued and the queue is written at the end of the turn (setImmediate), so
 * lines keep their order and none waits for a later turn. Lines at WARN and above are
 * written at once, with whatever is queued before them.
 *
 * What can be lost: the queued lines of the turn in progress when the process dies
 * without running its exit handlers (kill -9, a signal without a handler, V8 running out
 * of memory). A normal exit, process.exit, an uncaught exception and exit handlers
 * (whenever registered) all write everything.
 *
 * A reader that stops taking lines (standard output is a pipe, full: EAGAIN) does not
 * block the event loop: the bytes not taken wait, whole, and are tried again shortly;
 * beyond MAX_QUEUED_BYTES new lines are dropped and counted, and a line saying how many
 * goes out once the reader takes lines again. At exit the writes block until done, for
 * at most EXIT_WAIT_MS.
 *
 * Owns: the queue and the writes. Must never: format lines (pino does) or write from
 * another thread.
 */

import * as fs from 'node:fs';

/** Above this many queued bytes the queue is written at once, not at the end of the turn. */
const FLUSH_BYTES = 64 * 1024;
/** Queued bytes beyond which new lines are dropped (and counted) while the reader takes nothing. */
const MAX_QUEUED_BYTES = 16 * 1024 * 1024;
/** After EAGAIN, the next try. */
const RETRY_MS = 10;
/** At exit, how long a full reader is waited for. */
const EXIT_WAIT_MS = 10_000;

export class TurnBatchedSink {
  private pending: string[] = [];
  private bytes = 0;
  /** Bytes a write did not take (EAGAIN, or a partial write), written before any queued line. */
  private tail: Buffer | null = null;
  private dropped = 0;
  private scheduled = false;
  private retry: NodeJS.Timeout | null = null;
  /** Set once the process is exiting: no later turn comes, every line is written at once. */
  private exiting = false;
  private readonly flushSoon = () => {
    this.scheduled = false;
    this.flush();
  };
  private readonly retryNow = () => {
    this.retry = null;
    this.flush(true);
  };

  constructor(private readonly fd: number) {
    process.on('exit', () => {
      this.exiting = true;
      this.flush();
    });
  }

  /** pino's destination interface: takes one formatted line (with its newline). */
  write(line: string): boolean {
    if (this.bytes + (this.tail?.length ?? 0) >= MAX_QUEUED_BYTES && !this.exiting) {
      this.dropped++;
      return true;
    }
    this.pending.push(line);
    this.bytes += line.length;
    // pino's lines begin `{"level":NN`: 40 and above (warn, error, fatal) leave at once.
    if (this.exiting || this.bytes >= FLUSH_BYTES || (line.charCodeAt(9) >= 52 /* '4' */ && line.startsWith('{"level":'))) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flushSoon);
    }
    return true;
  }

  /**
   * Writes what is queued now, as far as the reader takes it. While bytes a full reader
   * did not take wait, only the retry timer (and exit) writes: a turn that logs then only
   * queues its lines, instead of copying everything waiting into one buffer again.
   */
  flush(retrying = false): void {
    if (this.tail !== null && !retrying && !this.exiting) return;
    if (this.dropped > 0 && this.tail === null) {
      const n = this.dropped;
      this.dropped = 0;
      this.pending.unshift(JSON.stringify({ level: 40, time: new Date().toISOString(), name: 'quiver', msg: `${n} log lines dropped: standard output took nothing while more than ${MAX_QUEUED_BYTES} bytes waited` }) + '\n');
    }
    if (this.pending.length === 0 && this.tail === null) return;
    const text = this.pending.length === 0 ? '' : this.pending.length === 1 ? this.pending[0] : this.pending.join('');
    this.pending = [];
    this.bytes = 0;
    const buf = this.tail === null ? Buffer.from(text, 'utf8') : text === '' ? this.tail : Buffer.concat([this.tail, Buffer.from(text, 'utf8')]);
    this.tail = null;
    const left = writeSome(this.fd, buf, this.exiting ? EXIT_WAIT_MS : 0);
    if (left === null || left.length === 0) return;
    this.tail = left;
    if (this.retry === null && !this.exiting) {
      this.retry = setTimeout(this.retryNow, RETRY_MS);
      this.retry.unref();
    }
  }
}

/**
 * write(2) until every byte of `buf` is out, or the descriptor is full (EAGAIN) for
 * longer than `waitMs`: returns the bytes not written (empty when all were), or null
 * when standard output is gone (EPIPE and other errors: the lines have nowhere to go).
 */
function writeSome(fd: number, buf: Buffer, waitMs: number): Buffer | null {
  let off = 0;
  const giveUpAt = performance.now() + waitMs;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') return null;
      if (performance.now() >= giveUpAt) return buf.subarray(off);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
  return buf.subarray(off);
}
