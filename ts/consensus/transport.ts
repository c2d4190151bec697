/**
 * How the consensus driver reaches the other peers, and how they reach it: the narrow
 * interface the driver is constructed with. ts/api/p2p implements it over gRPC; the
 * driver never sees the wire.
 *
 * Owns: the calls between peers (a Raft message, join, a forwarded proposal, the
 * leader's snapshot, who-is, wait-applied), the handlers the driver serves them with,
 * and `PeerCallError`, a failure between peers described by a reason of its own.
 * Must never: name a wire, a status code of any protocol, or a library that speaks one
 * (the transport maps reasons to and from its codes in one table).
 */

import type { PeerId } from './types';

/** Why a call between peers failed, as the driver tells the cases apart. */
export type PeerCallReason = 'invalid_argument' | 'unavailable' | 'not_leader' | 'internal' | 'timeout';

/** A failure a handler reports to the calling peer, or a call to another peer came back with. */
export class PeerCallError extends Error {
  constructor(
    readonly reason: PeerCallReason,
    message: string,
  ) {
    super(message);
    this.name = 'PeerCallError';
  }
}

export interface JoinRequest {
  peerId: PeerId;
  uri: string;
  port: number;
}

export interface JoinResponse {
  peers: Record<PeerId, string>;
  leaderId: PeerId;
  uri: string;
}

/** Failed sends to one peer, for GET /cluster. */
export interface SendFailures {
  count: number;
  latest_error: string | null;
  latest_error_timestamp: string | null;
}

/** What this peer answers the others with (the driver's side of every call). */
export interface PeerHandlers {
  /** One encoded Raft message (never throws: a bad message is the handler's to log). */
  onMessage(message: Uint8Array): void;
  /** `callerHost` is the host the connection came from (for a joiner without a URI). */
  join(req: JoinRequest, callerHost: string | null): Promise<JoinResponse>;
  propose(operation: Uint8Array, confChange: boolean): Promise<{ index: number; term: number }>;
  snapshot(): Promise<{ snapshot: Uint8Array; leaderId: PeerId }>;
  whoIs(): { peerId: PeerId; uri: string };
  /** `term`: the entry at `index` must have it (false when it has another: the entry waited for was lost in a leader change); null: any. */
  waitApplied(index: number, timeoutMs: number, term: number | null): Promise<boolean>;
}

/**
 * The other peers, by URI. A call that the other peer refuses, or that cannot reach it,
 * rejects with a PeerCallError; a URI that cannot name a peer rejects with a plain Error.
 */
export interface PeerTransport {
  /** Starts answering the other peers with `handlers`; resolves with the port it listens on. */
  serve(handlers: PeerHandlers): Promise<number>;
  /** Sends one Raft message; never throws (a failure is counted in sendFailures). */
  send(uri: string, message: Uint8Array): void;
  join(uri: string, req: JoinRequest, timeoutMs?: number): Promise<JoinResponse>;
  propose(uri: string, operation: Uint8Array, confChange: boolean, timeoutMs?: number): Promise<{ index: number; term: number }>;
  snapshot(uri: string): Promise<{ snapshot: Uint8Array; leaderId: PeerId }>;
  whoIs(uri: string, timeoutMs?: number): Promise<{ peerId: PeerId; uri: string }>;
  /** Whether the peer at `uri` applied entry `index` (of `term`, when given) within `timeoutMs` (false on any failure). */
  waitApplied(uri: string, index: number, timeoutMs: number, term?: number): Promise<boolean>;
  /** Lets go of the connection to a peer that left. */
  forget(uri: string): void;
  /** Failed sends by peer URI. */
  sendFailures(): Record<string, SendFailures>;
  /** Stops answering (calls in flight get a moment to finish), then closes every connection. */
  close(): Promise<void>;
}
