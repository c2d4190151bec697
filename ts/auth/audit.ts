/**
 * The audit log (`audit.*` config): one JSON line per access check, written to
 * `audit-YYYY-MM-DD.log` (rotation `daily`) or `audit-YYYY-MM-DD-HH.log` (`hourly`),
 * UTC, in `audit.dir`. When the period changes the log moves to a new file and only the
 * newest `max_log_files` audit files are kept. Files of the current period are appended
 * to, so a restart continues them.
 *
 * Owns: the line format (`{"time": <ISO>, ...event}`), file naming, rotation, pruning
 * old audit files (never a file whose name is not an audit file name), write ordering.
 * Must never: block the event loop on disk (record() only queues; one async writer
 * appends batches in order), throw into request handling (write errors are logged and
 * the batch dropped), or decide who is allowed (the caller fills the event).
 */

import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import type { Logger } from 'pino';

import type { AuditConfig } from '../config/types';

export interface AuditEvent {
  /** "api_key", "read_only_api_key", "jwt:<sub>", or null when no credentials were given. */
  subject: string | null;
  /** Client address. */
  address: string | null;
  method: string;
  path: string;
  collection: string | null;
  allowed: boolean;
  /** Why access was refused (or granted), when there is something to say. */
  reason: string | null;
  /** Response status, when known. */
  status?: number;
}

export interface AuditLogOptions {
  /** Clock; decides both the `time` field and the file an event goes to. */
  now?: () => Date;
  logger?: Logger;
}

/** Lines queued beyond this are dropped (and counted) rather than growing memory without bound. */
const MAX_QUEUED = 100_000;

/** `audit-YYYY-MM-DD.log` or `audit-YYYY-MM-DD-HH.log`; groups: date, hour. */
const AUDIT_FILE = /^audit-(\d{4}-\d{2}-\d{2})(?:-(\d{2}))?\.log$/;

function pad(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/** The audit file name for the period holding `t` (UTC). */
export function auditFileName(t: Date, rotation: AuditConfig['rotation']): string {
  const day = `${t.getUTCFullYear()}-${pad(t.getUTCMonth() + 1)}-${pad(t.getUTCDate())}`;
  return rotation === 'hourly' ? `audit-${day}-${pad(t.getUTCHours())}.log` : `audit-${day}.log`;
}

/**
 * Sort key of an audit file name by the start of its period (a daily file starts at
 * hour 00), so daily and hourly files left by a rotation change order correctly;
 * null for names that are not audit files.
 */
function periodKey(name: string): string | null {
  const m = AUDIT_FILE.exec(name);
  if (!m) return null;
  return `${m[1]}-${m[2] ?? '00'}|${m[2] === undefined ? 0 : 1}`;
}

interface Pending {
  file: string;
  line: string;
}

export class AuditLog {
  /** False for the no-op log (audit disabled): record() returns at once. */
  readonly enabled: boolean;

  private readonly dir: string;
  private readonly rotation: AuditConfig['rotation'];
  private readonly maxFiles: number;
  private readonly now: () => Date;
  private readonly logger: Logger | undefined;

  private queue: Pending[] = [];
  private draining = false;
  private closed = false;
  private closing: Promise<void> | null = null;
  /** Events accepted by record() / events written or given up on. */
  private recorded = 0;
  private done = 0;
  private waiters: { seq: number; resolve: () => void }[] = [];
  private dropped = 0;

  /** Name of the file the last event went to (decides when to rotate and prune). */
  private currentName: string | null = null;
  private fh: fs.FileHandle | null = null;
  private fhName: string | null = null;

  private constructor(cfg: AuditConfig | null, opts: AuditLogOptions = {}) {
    this.enabled = cfg !== null;
    this.dir = cfg?.dir ?? '';
    this.rotation = cfg?.rotation === 'hourly' ? 'hourly' : 'daily';
    this.maxFiles = Math.max(1, Math.floor(cfg?.max_log_files ?? 1));
    this.now = opts.now ?? (() => new Date());
    this.logger = opts.logger;
  }

  /** A log that records nothing. */
  static disabled(): AuditLog {
    return new AuditLog(null);
  }

  /**
   * Opens the audit log described by `cfg`: creates the folder and prunes old files.
   * Returns the no-op log when `cfg.enabled` is false (nothing is created).
   */
  static async open(cfg: AuditConfig, opts: AuditLogOptions = {}): Promise<AuditLog> {
    if (!cfg.enabled) return NO_AUDIT;
    const log = new AuditLog(cfg, opts);
    await fs.mkdir(log.dir, { recursive: true });
    log.currentName = auditFileName(log.now(), log.rotation);
    await log.prune(log.currentName);
    return log;
  }

  /** Queues one line; never waits for the disk and never throws. */
  record(e: AuditEvent): void {
    if (!this.enabled || this.closed) return;
    if (this.queue.length >= MAX_QUEUED) {
      if (this.dropped++ === 0) {
        this.logger?.error({ dir: this.dir }, 'audit log: writer is behind, dropping events');
      }
      return;
    }
    let line: string;
    let file: string;
    try {
      const t = this.now();
      file = auditFileName(t, this.rotation);
      line = JSON.stringify({ time: t.toISOString(), ...e }) + '\n';
    } catch (err) {
      this.logger?.error({ err }, 'audit log: cannot format event');
      return;
    }
    this.queue.push({ file, line });
    this.recorded++;
    if (!this.draining) {
      this.draining = true;
      // Later: batch everything recorded in this tick into one write.
      setImmediate(() => void this.drain());
    }
  }

  /** Resolves when every event recorded before the call is written (or failed and logged). */
  flush(): Promise<void> {
    const seq = this.recorded;
    if (this.done >= seq) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ seq, resolve }));
  }

  /** Flushes, then closes the file. Later record() calls are ignored. */
  close(): Promise<void> {
    if (!this.enabled) return Promise.resolve();
    if (!this.closing) {
      this.closed = true;
      this.closing = this.flush().then(() => this.closeFile());
    }
    return this.closing;
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        // The longest run of lines for one file, in record order.
        const file = this.queue[0].file;
        let n = 1;
        while (n < this.queue.length && this.queue[n].file === file) n++;
        const batch = this.queue.splice(0, n);
        await this.writeBatch(file, batch.map((p) => p.line).join(''));
        this.settle(n);
      }
    } finally {
      this.draining = false;
      if (this.queue.length > 0) {
        this.draining = true;
        setImmediate(() => void this.drain());
      }
    }
  }

  private async writeBatch(file: string, data: string): Promise<void> {
    try {
      if (file !== this.currentName) {
        this.currentName = file;
        await this.closeFile();
        await this.prune(file);
      }
      if (this.fhName !== file) {
        await this.closeFile();
        this.fh = await this.openFile(file);
        this.fhName = file;
      }
      await this.fh!.appendFile(data);
    } catch (err) {
      this.logger?.error({ err, file: path.join(this.dir, file) }, 'audit log: write failed, events lost');
      await this.closeFile();
    }
  }

  private async openFile(file: string): Promise<fs.FileHandle> {
    const full = path.join(this.dir, file);
    try {
      return await fs.open(full, 'a');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      // The folder was removed while running: create it again.
      await fs.mkdir(this.dir, { recursive: true });
      return await fs.open(full, 'a');
    }
  }

  private async closeFile(): Promise<void> {
    const fh = this.fh;
    this.fh = null;
    this.fhName = null;
    if (fh) {
      try {
        await fh.close();
      } catch (err) {
        this.logger?.warn({ err }, 'audit log: close failed');
      }
    }
  }

  /**
   * Keeps the newest `max_log_files` audit files, counting `current` (which may not
   * exist yet) as the newest. Other files in the folder are never touched.
   */
  private async prune(current: string): Promise<void> {
    let names: string[];
    try {
      names = await fs.readdir(this.dir);
    } catch (err) {
      this.logger?.warn({ err, dir: this.dir }, 'audit log: cannot list folder for pruning');
      return;
    }
    const old = names
      .filter((n) => n !== current)
      .map((n) => ({ n, k: periodKey(n) }))
      .filter((x): x is { n: string; k: string } => x.k !== null)
      .sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : a.n < b.n ? -1 : a.n > b.n ? 1 : 0));
    const excess = old.length + 1 - this.maxFiles;
    for (let i = 0; i < excess; i++) {
      const file = path.join(this.dir, old[i].n);
      try {
        await fs.rm(file, { force: true });
      } catch (err) {
        this.logger?.warn({ err, file }, 'audit log: cannot remove old file');
      }
    }
  }

  private settle(n: number): void {
    this.done += n;
    if (this.waiters.length === 0) return;
    const ready = this.waiters.filter((w) => w.seq <= this.done);
    this.waiters = this.waiters.filter((w) => w.seq > this.done);
    for (const w of ready) w.resolve();
  }
}

/** The no-op log, returned by open() when `audit.enabled` is false. */
export const NO_AUDIT: AuditLog = AuditLog.disabled();
