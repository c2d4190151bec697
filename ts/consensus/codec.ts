/**
 * Encoding of Raft messages, entries and snapshots for the wire and the disk: JSON with
 * binary fields (entry data, snapshot data) in base64.
 *
 * Owns: the byte form of ts/consensus/types.ts values and the strict check of bytes that
 * come from the network or a file (every field's type, known message kinds, integer
 * indexes and terms). Must never: accept something half-valid: a malformed input is a
 * CodecError, never a message with made-up fields.
 */

import type { ConfChange, ConfState, Entry, HardState, Message, Snapshot } from './types';

export class CodecError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CodecError';
  }
}

type Obj = Record<string, unknown>;

function obj(x: unknown, what: string): Obj {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) throw new CodecError(`${what}: expected an object`);
  return x as Obj;
}

function uint(o: Obj, k: string, what: string): number {
  const v = o[k];
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new CodecError(`${what}.${k}: expected a non-negative integer`);
  return v;
}

function str(o: Obj, k: string, what: string): string {
  const v = o[k];
  if (typeof v !== 'string') throw new CodecError(`${what}.${k}: expected a string`);
  return v;
}

function bool(o: Obj, k: string, what: string): boolean {
  const v = o[k];
  if (typeof v !== 'boolean') throw new CodecError(`${what}.${k}: expected a boolean`);
  return v;
}

/** Padded base64 (what Buffer#toString('base64') writes): whole groups of four. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function bytes(o: Obj, k: string, what: string): Uint8Array {
  const v = o[k];
  if (typeof v !== 'string' || !BASE64.test(v)) throw new CodecError(`${what}.${k}: expected base64`);
  return new Uint8Array(Buffer.from(v, 'base64'));
}

function peers(o: Obj, k: string, what: string): string[] {
  const v = o[k];
  if (!Array.isArray(v) || !v.every((p) => typeof p === 'string')) throw new CodecError(`${what}.${k}: expected a list of peer ids`);
  return v as string[];
}

const b64 = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('base64');

// -- plain values (JSON-ready) -------------------------------------------------------------

export function entryToJson(e: Entry): Obj {
  if (e.type === 'normal') return { index: e.index, term: e.term, type: 'normal', data: b64(e.data) };
  if (e.type === 'confChange') return { index: e.index, term: e.term, type: 'confChange', change: { ...e.change } };
  return { index: e.index, term: e.term, type: 'noop' };
}

export function confChangeFromJson(x: unknown, what = 'change'): ConfChange {
  const o = obj(x, what);
  const peer = str(o, 'peer', what);
  switch (o.type) {
    case 'addLearner':
      if (o.context !== undefined && typeof o.context !== 'string') throw new CodecError(`${what}.context: expected a string`);
      return o.context === undefined ? { type: 'addLearner', peer } : { type: 'addLearner', peer, context: o.context as string };
    case 'promoteLearner':
      return { type: 'promoteLearner', peer };
    case 'removePeer':
      if (o.conditional !== undefined && typeof o.conditional !== 'boolean') throw new CodecError(`${what}.conditional: expected a boolean`);
      return o.conditional === true ? { type: 'removePeer', peer, conditional: true } : { type: 'removePeer', peer };
    default:
      throw new CodecError(`${what}.type: unknown membership change ${JSON.stringify(o.type)}`);
  }
}

export function entryFromJson(x: unknown, what = 'entry'): Entry {
  const o = obj(x, what);
  const index = uint(o, 'index', what);
  const term = uint(o, 'term', what);
  switch (o.type) {
    case 'noop':
      return { index, term, type: 'noop' };
    case 'normal':
      return { index, term, type: 'normal', data: bytes(o, 'data', what) };
    case 'confChange':
      return { index, term, type: 'confChange', change: confChangeFromJson(o.change, `${what}.change`) };
    default:
      throw new CodecError(`${what}.type: unknown entry type ${JSON.stringify(o.type)}`);
  }
}

export function confStateFromJson(x: unknown, what = 'conf'): ConfState {
  const o = obj(x, what);
  return { voters: peers(o, 'voters', what), learners: peers(o, 'learners', what) };
}

export function snapshotToJson(s: Snapshot): Obj {
  return { meta: { index: s.meta.index, term: s.meta.term, conf: { voters: [...s.meta.conf.voters], learners: [...s.meta.conf.learners] } }, data: b64(s.data) };
}

export function snapshotFromJson(x: unknown, what = 'snapshot'): Snapshot {
  const o = obj(x, what);
  const m = obj(o.meta, `${what}.meta`);
  return {
    meta: { index: uint(m, 'index', `${what}.meta`), term: uint(m, 'term', `${what}.meta`), conf: confStateFromJson(m.conf, `${what}.meta.conf`) },
    data: bytes(o, 'data', what),
  };
}

export function hardStateFromJson(x: unknown, what = 'hardState'): HardState {
  const o = obj(x, what);
  if (o.vote !== null && typeof o.vote !== 'string') throw new CodecError(`${what}.vote: expected a peer id or null`);
  return { term: uint(o, 'term', what), vote: o.vote as string | null, commit: uint(o, 'commit', what) };
}

function messageToJson(m: Message): Obj {
  if (m.type === 'append') return { ...m, entries: m.entries.map(entryToJson) };
  if (m.type === 'installSnapshot') return { ...m, snapshot: snapshotToJson(m.snapshot) };
  return { ...m };
}

function messageFromJson(x: unknown): Message {
  const what = 'message';
  const o = obj(x, what);
  const base = { from: str(o, 'from', what), to: str(o, 'to', what), term: uint(o, 'term', what) };
  switch (o.type) {
    case 'preVote':
    case 'vote':
      return { ...base, type: o.type, lastLogIndex: uint(o, 'lastLogIndex', what), lastLogTerm: uint(o, 'lastLogTerm', what) };
    case 'preVoteResponse':
    case 'voteResponse':
      return { ...base, type: o.type, granted: bool(o, 'granted', what) };
    case 'append': {
      if (!Array.isArray(o.entries)) throw new CodecError('message.entries: expected a list');
      return {
        ...base,
        type: 'append',
        prevLogIndex: uint(o, 'prevLogIndex', what),
        prevLogTerm: uint(o, 'prevLogTerm', what),
        entries: o.entries.map((e, i) => entryFromJson(e, `message.entries[${i}]`)),
        commit: uint(o, 'commit', what),
      };
    }
    case 'appendResponse':
      if (bool(o, 'success', what)) return { ...base, type: 'appendResponse', success: true, matchIndex: uint(o, 'matchIndex', what) };
      return {
        ...base,
        type: 'appendResponse',
        success: false,
        rejectedIndex: uint(o, 'rejectedIndex', what),
        hintIndex: uint(o, 'hintIndex', what),
        hintTerm: uint(o, 'hintTerm', what),
      };
    case 'heartbeat':
      return { ...base, type: 'heartbeat', commit: uint(o, 'commit', what), leaderCommit: uint(o, 'leaderCommit', what) };
    case 'heartbeatResponse':
      return { ...base, type: 'heartbeatResponse' };
    case 'installSnapshot':
      return { ...base, type: 'installSnapshot', snapshot: snapshotFromJson(o.snapshot, 'message.snapshot') };
    default:
      throw new CodecError(`message.type: unknown message type ${JSON.stringify(o.type)}`);
  }
}

function parse(b: Uint8Array, what: string): unknown {
  try {
    return JSON.parse(Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('utf8'));
  } catch (err) {
    throw new CodecError(`${what}: not JSON (${(err as Error).message})`);
  }
}

// -- bytes ---------------------------------------------------------------------------------

export function encodeMessage(m: Message): Buffer {
  return Buffer.from(JSON.stringify(messageToJson(m)), 'utf8');
}

export function decodeMessage(b: Uint8Array): Message {
  return messageFromJson(parse(b, 'message'));
}

export function encodeSnapshot(s: Snapshot): Buffer {
  return Buffer.from(JSON.stringify(snapshotToJson(s)), 'utf8');
}

export function decodeSnapshot(b: Uint8Array): Snapshot {
  return snapshotFromJson(parse(b, 'snapshot'));
}

export function encodeEntry(e: Entry): Buffer {
  return Buffer.from(JSON.stringify(entryToJson(e)), 'utf8');
}

export function decodeEntry(b: Uint8Array): Entry {
  return entryFromJson(parse(b, 'entry'));
}
