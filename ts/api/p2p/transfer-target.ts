/**
 * The target of a shard transfer as its source reaches it over the points service: the
 * copy traffic (batches of points, replayed operations, a snapshot to fetch), each call
 * naming the transfer, and the reads a transfer makes of its target.
 *
 * Owns: the client side of that traffic. Must never: decide what to copy (ts/transfer
 * does) or apply anything (the target's local replica does).
 */

import type { ShardTarget, TransferMethod } from '../../collection/cluster-link';
import type { ReadOptions, UpdateOptions } from '../../collection/replica';
import { encodeReplicaOperation, type ReplicaOperation } from '../../collection/replica-operation';
import type { ClockTag } from '../../shard/clocks';
import type { PointWrite } from '../../shard/operations';
import type { TransferTarget } from '../../transfer/outgoing';
import { clockMsg, clockOf, RemoteReplica, targetMsg, updateMsg, type ClockMsg, type PointsClients, type PullSnapshotMsg, type ReplayMsg } from './points';

/** Reads a transfer makes of its target. */
const TRANSFER_READ: ReadOptions = { consistency: { factor: 1 }, timeout: null };
/** A snapshot transfer's fetch and restore: long; a peer that stops answering health checks, or the run stopping, cancels it. */
const PULL_TIMEOUT_MS = 6 * 3600 * 1000;

export class RemoteTransferTarget extends RemoteReplica implements TransferTarget {
  constructor(
    peer: string,
    target: ShardTarget,
    clients: PointsClients,
    uriOf: (peer: string) => string,
    /** The transfer's id: the target takes copy traffic of this transfer only. */
    private readonly transfer: string,
  ) {
    super(peer, target, clients, uriOf);
  }

  async ready(from: string, method: TransferMethod, timeoutMs: number): Promise<boolean> {
    const r = await this.read<{ ready: boolean }>('transfer_ready', { from, method, id: this.transfer }, { consistency: { factor: 1 }, timeout: timeoutMs / 1000 });
    return r.ready;
  }

  async clocks(): Promise<ClockTag[]> {
    return (await this.read<ClockMsg[]>('clocks', {}, TRANSFER_READ)).map(clockOf);
  }

  async indexBacklog(): Promise<number> {
    return (await this.read<{ backlog: number }>('index_backlog', {}, TRANSFER_READ)).backlog;
  }

  async copy(op: ReplicaOperation, wait: boolean): Promise<void> {
    await this.clients.call(this.uri(), this.peer, 'Update', updateMsg(this.target, op, { wait, ordering: 'weak', timeout: null }, null, this.transfer), null);
  }

  async batch(points: PointWrite[], wait: boolean): Promise<void> {
    await this.copy({ kind: 'upsert', points }, wait);
  }

  async deliver(op: ReplicaOperation, opts: UpdateOptions, tag: ClockTag | null): Promise<void> {
    await this.update(op, { ...opts, ordering: 'weak' }, tag ?? undefined);
  }

  async replay(ops: readonly ReplicaOperation[], end: { wait: boolean; adopt: readonly ClockTag[] | null }): Promise<void> {
    const msg: ReplayMsg = {
      target: targetMsg(this.target),
      operations: ops.map(encodeReplicaOperation),
      wait: end.wait,
      transfer: this.transfer,
      adopt: end.adopt !== null,
      clocks: (end.adopt ?? []).map(clockMsg),
    };
    await this.clients.call(this.uri(), this.peer, 'Replay', msg, null);
  }

  async pullSnapshot(from: string, signal: AbortSignal): Promise<number> {
    const msg: PullSnapshotMsg = { target: targetMsg(this.target), from, transfer: this.transfer };
    const res = await this.clients.call<{ bytes: string }>(this.uri(), this.peer, 'PullSnapshot', msg, PULL_TIMEOUT_MS, signal);
    return Number(res.bytes);
  }
}
