/**
 * TLS between peers (cluster.p2p.enable_tls) with certificates made by openssl: three
 * peers form a cluster and agree on a collection; a peer whose certificate another CA
 * signed cannot join (start-up fails naming the bootstrap peer); a plaintext client gets
 * nothing from the p2p port.
 */

import test from 'ava';
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

import { PeerClients } from '../../ts/api/p2p/grpc';
import { Cluster, api, change, waitFor } from './harness';

const execFileP = promisify(execFile);

const PEER_EXT = `basicConstraints = CA:FALSE
subjectAltName = IP:127.0.0.1
extendedKeyUsage = serverAuth, clientAuth
`;

async function makePki(): Promise<{ dir: string; file(name: string): string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-p2p-tls-'));
  fs.writeFileSync(path.join(dir, 'peer.ext'), PEER_EXT);
  const openssl = (args: string[]) => execFileP('openssl', args, { cwd: dir });
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  for (const ca of ['ca', 'other-ca']) {
    await openssl(['req', '-x509', ...key, '-keyout', `${ca}.key`, '-out', `${ca}.pem`, '-days', '3', '-subj', `/CN=${ca}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
  }
  for (const [name, ca] of [['peer', 'ca'], ['stranger', 'other-ca']]) {
    await openssl(['req', '-new', ...key, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`]);
    await openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.pem`, '-CAkey', `${ca}.key`, '-CAcreateserial',
      '-out', `${name}.pem`, '-days', '3', '-extfile', 'peer.ext']);
  }
  return { dir, file: (name) => path.join(dir, name) };
}

test.serial('p2p TLS: peers with certificates of the cluster CA form a cluster; another CA\'s peer cannot join; plaintext gets nothing', async (t) => {
  const pki = await makePki();
  const tlsEnv = (name: string) => ({
    SERVICE__CLUSTER__P2P__ENABLE_TLS: 'true',
    SERVICE__TLS__CERT: pki.file(`${name}.pem`),
    SERVICE__TLS__KEY: pki.file(`${name}.key`),
    SERVICE__TLS__CA_CERT: pki.file('ca.pem'),
  });
  const c = await Cluster.prepare(4, { ...tlsEnv('peer'), SERVICE__CLUSTER__CONSENSUS__BOOTSTRAP_TIMEOUT_SEC: '3' });
  t.teardown(async () => {
    await c.destroy();
    fs.rmSync(pki.dir, { recursive: true, force: true });
  });
  await c.startPeer(0);
  await c.startPeer(1, 0);
  await c.startPeer(2, 0);
  await c.waitVoters(3);
  const leader = await c.waitLeader();
  t.is((await change(c.peers[(leader + 1) % 3].url, 'PUT', '/collections/secure', { vectors: { size: 2, distance: 'Dot' }, shard_number: 3, replication_factor: 2 })).status, 200);
  await waitFor('every peer lists it', async () => {
    for (let i = 0; i < 3; i++) {
      const names = (await api(c.peers[i].url, 'GET', '/collections')).body.result.collections.map((x: { name: string }) => x.name);
      if (!names.includes('secure')) return false;
    }
    return true;
  });

  // Points travel between peers over TLS too: written through one peer, read through each with every replica answering.
  const pts = Array.from({ length: 30 }, (_, k) => ({ id: k, vector: [1, k] }));
  const put = await api(c.peers[0].url, 'PUT', '/collections/secure/points?wait=true', { points: pts });
  t.is(put.status, 200, JSON.stringify(put.body));
  for (let i = 0; i < 3; i++) {
    t.is((await api(c.peers[i].url, 'POST', '/collections/secure/points/count?consistency=all', { exact: true })).body.result.count, 30);
  }

  // A peer whose certificate the cluster's CA did not sign: the TLS handshake fails, it cannot join.
  const err = await t.throwsAsync(c.startPeer(3, 0, tlsEnv('stranger')));
  t.regex(err!.message, /could not join the cluster through http:\/\/127\.0\.0\.1:\d+/);
  t.is(Object.keys((await c.info(leader)).peers).length, 3);

  // Plaintext: no answer from the p2p port.
  const plain = new PeerClients({ callTimeoutMs: 2000, connectTimeoutMs: 1000, messageTimeoutMs: 1000, maxInFlight: 1 });
  await t.throwsAsync(plain.whoIs(c.peers[0].uri, 2000));
  plain.close();
});
