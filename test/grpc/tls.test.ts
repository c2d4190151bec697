/**
 * The public gRPC API over TLS (`service.enable_tls`), on a real bin/quiver with
 * certificates made by `openssl` (test/support/pki.ts): the same certificate as HTTPS;
 * with `service.verify_https_client_certificate` only clients with a certificate signed
 * by `tls.ca_cert` get an answer; the certificate files are re-read every
 * `tls.cert_ttl` seconds and new connections get the new certificate.
 */

import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as tls from 'node:tls';

import test from 'ava';

import { makePki, type Pki } from '../support/pki';
import { waitFor } from '../support/wait';
import { codeName, QdrantGrpc, startGrpcQuiver, type TlsOptions } from './client';

let pkiPromise: Promise<Pki> | null = null;
const pki = () => (pkiPromise ??= makePki());

test.after.always(async () => {
  if (pkiPromise !== null) fs.rmSync((await pkiPromise).dir, { recursive: true, force: true });
});

const serialOf = (pem: Buffer) => new X509Certificate(pem).serialNumber;

/** The serial number of the certificate the gRPC port presents to a new connection (HTTP/2 over TLS). */
function servedSerial(port: number, ca: Buffer, client?: { cert: Buffer; key: Buffer }): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', servername: '', port, ca, ALPNProtocols: ['h2'], ...(client ?? {}) }, () => {
      const serial = s.getPeerCertificate().serialNumber;
      s.destroy();
      resolve(serial);
    });
    s.on('error', reject);
  });
}

/** HealthCheck through a new client: 'OK' or the status name of the failure. */
async function health(target: string, tlsOptions: TlsOptions | null): Promise<string> {
  const c = new QdrantGrpc(target, tlsOptions);
  try {
    await c.call('Qdrant', 'HealthCheck', {}, { deadlineMs: 5000 });
    return 'OK';
  } catch (err) {
    return codeName((err as { code: number }).code);
  } finally {
    c.close();
  }
}

test('TLS: the HTTPS certificate serves gRPC; a plaintext or untrusting client gets no answer', async (t) => {
  const p = await pki();
  const q = await startGrpcQuiver({ SERVICE__SERVICE__ENABLE_TLS: 'true', SERVICE__TLS__CERT: p.file('server-a.pem'), SERVICE__TLS__KEY: p.file('server-a.key') });
  try {
    t.is(await health(q.target, { ca: p.read('ca.pem') }), 'OK');
    t.is(await servedSerial(q.grpcPort, p.read('ca.pem')), serialOf(p.read('server-a.pem')));
    t.is(await health(q.target, null), 'UNAVAILABLE');
    t.is(await health(q.target, { ca: p.read('ca2.pem') }), 'UNAVAILABLE');
    const line = q.server.logLines().find((l) => l.msg === 'TLS enabled for the gRPC API');
    t.is(line?.serialNumber, serialOf(p.read('server-a.pem')));
    t.is(line?.verifyClientCertificate, false);
    // Collections work over it too.
    const c = q.client({ ca: p.read('ca.pem') });
    t.is((await c.call('Collections', 'Create', { collection_name: 'secure', vectors_config: { params: { size: '2', distance: 'Dot' } } })).result, true);
  } finally {
    await q.stop();
  }
});

test('verify_https_client_certificate: only a client certificate signed by tls.ca_cert gets an answer', async (t) => {
  const p = await pki();
  const q = await startGrpcQuiver({
    SERVICE__SERVICE__ENABLE_TLS: 'true',
    SERVICE__SERVICE__VERIFY_HTTPS_CLIENT_CERTIFICATE: 'true',
    SERVICE__TLS__CERT: p.file('server-a.pem'),
    SERVICE__TLS__KEY: p.file('server-a.key'),
    SERVICE__TLS__CA_CERT: p.file('ca.pem'),
  });
  try {
    const ca = p.read('ca.pem');
    t.is(await health(q.target, { ca, cert: p.read('client.pem'), key: p.read('client.key') }), 'OK');
    t.is(await health(q.target, { ca }), 'UNAVAILABLE', 'no client certificate');
    t.is(await health(q.target, { ca, cert: p.read('client2.pem'), key: p.read('client2.key') }), 'UNAVAILABLE', 'a certificate from another CA');
    t.is(await health(q.target, { ca, cert: p.read('expired.pem'), key: p.read('expired.key') }), 'UNAVAILABLE', 'an expired certificate');
  } finally {
    await q.stop();
  }
});

test('certificates are re-read every tls.cert_ttl seconds: new gRPC connections get the new one', async (t) => {
  const p = await pki();
  const live = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-grpc-tls-live-'));
  const certFile = path.join(live, 'cert.pem');
  const keyFile = path.join(live, 'key.pem');
  const put = (file: string, data: Buffer) => {
    fs.writeFileSync(`${file}.tmp`, data);
    fs.renameSync(`${file}.tmp`, file);
  };
  put(certFile, p.read('server-a.pem'));
  put(keyFile, p.read('server-a.key'));
  const q = await startGrpcQuiver({ SERVICE__SERVICE__ENABLE_TLS: 'true', SERVICE__TLS__CERT: certFile, SERVICE__TLS__KEY: keyFile, SERVICE__TLS__CERT_TTL: '1' });
  try {
    const ca = p.read('ca.pem');
    t.is(await servedSerial(q.grpcPort, ca), serialOf(p.read('server-a.pem')));
    put(keyFile, p.read('server-b.key'));
    put(certFile, p.read('server-b.pem'));
    const serialB = serialOf(p.read('server-b.pem'));
    await waitFor('certificate B on the gRPC port', async () => (await servedSerial(q.grpcPort, ca)) === serialB);
    t.is(await health(q.target, { ca }), 'OK');
  } finally {
    await q.stop();
    fs.rmSync(live, { recursive: true, force: true });
  }
});
