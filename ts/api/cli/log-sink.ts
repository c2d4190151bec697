/**
 * Where the node's log lines go: standard output, written synchronously, but the lines of
 * one event-loop turn together.
 *
 * A node at the default level (INFO) writes a request line per request; one write(2)
 * per line was about 5% of the event-loop samples of a peer answering queries (a CPU
 * profile by hand; the cluster A/B is in docs/replication.md, "Limits, known"). Here a
 * line is queued and the queue is written with one
 * write(2) at the end of the turn (setImmediate), and at once when the process exits, so
 * lines keep their order and none waits for a later turn. What a kill -9 can lose is the
 * lines of the turn it interrupts.
 *
 * Owns: the queue and the writes. Must never: format lines (pino does) or write from
 * another thread.
 */

import * as fs from 'node:fs';

/** Above this many queued bytes the queue is written at once, not at the end of the turn. */
const FLUSH_BYTES = 64 * 1024;

export class TurnBatchedSink {
  private pending: string[] = [];
  private bytes = 0;
  private scheduled = false;
  /** Set once the process is exiting: no later turn comes, every line is written at once. */
  private exiting = false;
  private readonly flushSoon = () => {
    this.scheduled = false;
    this.flush();
  };

  constructor(private readonly fd: number) {
    process.on('exit', () => {
      this.exiting = true;
      this.flush();
    });
  }

  /** pino's destination interface: takes one formatted line (with its newline). */
  write(line: string): boolean {
    this.pending.push(line);
    this.bytes += line.length;
    if (this.exiting || this.bytes >= FLUSH_BYTES) this.flush();
    else if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flushSoon);
    }
    return true;
  }

  /** Writes every queued line now. */
  flush(): void {
    if (this.pending.length === 0) return;
    const text = this.pending.length === 1 ? this.pending[0] : this.pending.join('');
    this.pending = [];
    this.bytes = 0;
    writeAll(this.fd, Buffer.from(text, 'utf8'));
  }
}

/** write(2) until every byte is out; a descriptor in non-blocking mode that is full (EAGAIN) is waited for. */
function writeAll(fd: number, buf: Buffer): void {
  let off = 0;
  let waits = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
      waits = 0;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // Standard output closed (EPIPE) or gone: the lines have nowhere to go.
      if (code !== 'EAGAIN' || ++waits > 10_000) return;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
    }
  }
}
