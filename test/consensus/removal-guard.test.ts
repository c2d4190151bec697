/**
 * An unforced removal of a peer (`DELETE /cluster/peer/{id}`, and a drain with
 * `remove=true`) checks "the peer holds no replica" twice: when asked, on the state the
 * asking peer applied, and when the removal entry is applied, on every peer alike. A
 * replica placed on the peer by an entry committed between the two (here: a collection
 * created with its replica there, proposed just before the removal) makes the removal a
 * no-op: the peer stays a member with that replica, and the caller gets the 400. Before,
 * the removal applied and dropped the replica (the state machine drops a removed peer's
 * replicas).
 *
 * The founding peer runs the real driver and the metadata state machine over a local
 * table of collections; the peer to remove is a learner that never answers (the
 * transport drops every message), which the leader may add and remove alone.
 */

import test from 'ava';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import { BadRequestError } from '../../ts/common/errors';
import { parseCreateCollection } from '../../ts/collection/config';
import { loadConfig } from '../../ts/config';
import { ConsensusDriver } from '../../ts/consensus/driver';
import { PeerCallError, type PeerHandlers, type PeerTransport } from '../../ts/consensus/transport';
import { ClusterStateMachine } from '../../ts/storage/cluster-machine';
import { MetadataConsensus } from '../../ts/storage/metadata-consensus';
import { TableOfContent } from '../../ts/storage/toc';
import { waitFor } from '../support/wait';

const logger = pino({ level: 'silent' });

/** No other peer answers: messages are dropped; the handlers are kept for the test to call. */
function silent(): { transport: PeerTransport; handlers: () => PeerHandlers } {
  let served: PeerHandlers | null = null;
  const unreachable = () => Promise.reject(new PeerCallError('unavailable', 'no other peer here'));
  return {
    handlers: () => served!,
    transport: {
      serve: async (h) => {
        served = h;
        return 0;
      },
      send: () => undefined,
      join: unreachable,
      propose: unreachable,
      snapshot: unreachable,
      whoIs: unreachable,
      waitApplied: async () => false,
      forget: () => undefined,
      sendFailures: () => ({}),
      close: async () => undefined,
    },
  };
}

async function founding(t: import('ava').ExecutionContext) {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-removal-guard-'));
  t.teardown(() => fs.rm(dir, { recursive: true, force: true }));
  const toc = await TableOfContent.open(path.join(dir, 'storage'), loadEngine({ logger }), logger);
  const machine = new ClusterStateMachine(toc, '1', logger);
  const { transport, handlers } = silent();
  const driver = await ConsensusDriver.start({
    settings: { tick_period_ms: 10, compact_wal_entries: 128, bootstrap_timeout_sec: 5, max_message_queue_size: 16 },
    logger,
    dir: path.join(dir, 'raft'),
    peerId: '1',
    uri: 'http://127.0.0.1:1',
    bootstrap: null,
    machine,
    transport,
  });
  const consensus = new MetadataConsensus(driver, machine);
  t.teardown(async () => {
    await consensus.close();
    await toc.close();
  });
  await waitFor('a leader', () => driver.status().role === 'leader', undefined, 10);
  // Its first entry applied (no membership change is taken before).
  await consensus.propose({ op: 'setClusterMetadata', key: 'started', value: true }, 10_000);
  // Peer 2 joins as a learner (it never answers, so it is never promoted).
  await handlers().join({ peerId: '2', uri: 'http://127.0.0.1:2', port: 2 }, null);
  t.true(driver.isMember('2'));
  return { consensus, machine, driver };
}

const config = parseCreateCollection({ vectors: { size: 2, distance: 'Dot' }, shard_number: 1 }, loadConfig({ env: {} }));

test('a replica placed on a peer between the removal check and the removal entry: the removal is refused when applied, and the replica stays', async (t) => {
  const { consensus, machine, driver } = await founding(t);
  // Proposed first, not yet applied when the removal is asked: the check on the applied state passes.
  const create = consensus.propose({ op: 'createCollection', name: 'c', uuid: 'u-1', config, shards: [{ id: 0, replicas: { '1': 'Active', '2': 'Active' } }] }, 10_000);
  t.deepEqual(machine.state.shardsOn('2'), [], 'the collection is not applied yet when the removal is asked');
  const removal = consensus.removePeer('2', false, 10_000);
  await t.notThrowsAsync(create.catch((err: unknown) => (err instanceof BadRequestError ? Promise.reject(err) : undefined)));
  const err = await t.throwsAsync(removal, { instanceOf: BadRequestError });
  t.is(err?.message, 'Bad request: Cannot remove peer 2 as there are shards on it');
  t.deepEqual(machine.state.collection('c')?.shards[0].replicas, { '1': 'Active', '2': 'Active' }, 'the replica on peer 2 is kept');
  t.true(driver.isMember('2'), 'peer 2 is still a member');
  t.truthy(machine.state.peers['2']);

  // The leader takes proposals again, and a forced removal still goes (dropping the replica, as documented).
  await consensus.propose({ op: 'setClusterMetadata', key: 'k', value: 1 }, 10_000);
  t.true(await consensus.removePeer('2', true, 10_000));
  t.false(driver.isMember('2'));
  t.deepEqual(machine.state.collection('c')?.shards[0].replicas, { '1': 'Active' });
});

test('an unforced removal of a peer that holds no replica when applied goes through', async (t) => {
  const { consensus, machine, driver } = await founding(t);
  await consensus.propose({ op: 'createCollection', name: 'c', uuid: 'u-1', config, shards: [{ id: 0, replicas: { '1': 'Active' } }] }, 10_000).catch(() => undefined);
  t.true(await consensus.removePeer('2', false, 10_000));
  t.false(driver.isMember('2'));
  t.false(Object.prototype.hasOwnProperty.call(machine.state.peers, '2'));
});
