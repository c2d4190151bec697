/**
 * HTTPS for the REST API: the real bin/quiver with certificates made by `openssl` in a
 * temporary folder (a CA, server certificates A and B for 127.0.0.1, a client
 * certificate, one from a second CA, an expired one), client certificate checks,
 * certificate reload without downtime, and start-up refusals naming the file at fault.
 */

import test from 'ava';
import { X509Certificate } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as os from 'node:os';
import * as path from 'node:path';
import type * as tls from 'node:tls';
import pino from 'pino';

import { loadConfig } from '../../ts/config';
import { createRestServer, loadRestTls, stopCertificateReload, TlsSetupError } from '../../ts/api/tls';
import { DEADLINE_MS, sleep, waitFor } from '../support/wait';
import { runQuiver, startQuiver } from './helpers';
import { makePki, type Pki } from '../support/pki';

let pkiPromise: Promise<Pki> | null = null;
const pki = () => (pkiPromise ??= makePki());

test.after.always(async () => {
  if (pkiPromise !== null) fs.rmSync((await pkiPromise).dir, { recursive: true, force: true });
});

function tlsEnv(p: Pki, extra: Record<string, string> = {}): Record<string, string> {
  return {
    SERVICE__SERVICE__ENABLE_TLS: 'true',
    SERVICE__TLS__CERT: p.file('server-a.pem'),
    SERVICE__TLS__KEY: p.file('server-a.key'),
    ...extra,
  };
}

interface Answer {
  status: number;
  body: string;
  /** Serial number of the certificate the server presented (hex, upper case). */
  serial: string;
}

/** One GET over a new TLS connection (no agent, so each call sees the current certificate). */
function httpsGet(port: number, options: https.RequestOptions, pathname = '/'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      { host: '127.0.0.1', port, path: pathname, method: 'GET', agent: false, timeout: DEADLINE_MS, ...options },
      (res) => {
        const serial = (res.socket as tls.TLSSocket).getPeerCertificate().serialNumber;
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, serial }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
    req.end();
  });
}

function httpGet(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/', agent: false, timeout: DEADLINE_MS }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
  });
}

const serialOf = (pem: Buffer) => new X509Certificate(pem).serialNumber;

test('HTTPS serves GET / with the server certificate; plain HTTP and an untrusting client fail', async (t) => {
  const p = await pki();
  const q = await startQuiver(tlsEnv(p));
  try {
    const ok = await httpsGet(q.port, { ca: p.read('ca.pem') });
    t.is(ok.status, 200);
    t.truthy((JSON.parse(ok.body) as { version?: string }).version);
    t.is(ok.serial, serialOf(p.read('server-a.pem')));
    // The server does not ask for a client certificate here: sending one changes nothing.
    t.is((await httpsGet(q.port, { ca: p.read('ca.pem'), cert: p.read('client2.pem'), key: p.read('client2.key') })).status, 200);

    await t.throwsAsync(httpGet(q.port), undefined, 'plain HTTP gets no HTTP answer');
    await t.throwsAsync(httpsGet(q.port, {}), { message: /certificate/i }, 'a client without the CA refuses the server');
    await t.throwsAsync(httpsGet(q.port, { ca: p.read('ca2.pem') }), { message: /certificate/i });

    t.is((await httpsGet(q.port, { ca: p.read('ca.pem') }, '/healthz')).status, 200, 'still serving');
    const enabled = q.logLines().find((l) => l.msg === 'HTTPS enabled for the REST API');
    t.is(enabled?.serialNumber, serialOf(p.read('server-a.pem')));
    t.is(enabled?.verifyClientCertificate, false);
  } finally {
    t.is(await q.stop(), 0);
  }
});

test('verify_https_client_certificate: only a valid client certificate from tls.ca_cert gets an answer', async (t) => {
  const p = await pki();
  const q = await startQuiver(
    tlsEnv(p, {
      SERVICE__SERVICE__VERIFY_HTTPS_CLIENT_CERTIFICATE: 'true',
      SERVICE__TLS__CA_CERT: p.file('ca.pem'),
      SERVICE__LOG_LEVEL: 'DEBUG',
    }),
  );
  // Why the server refused each handshake (its debug log), in order.
  const refusals = () =>
    q.logLines()
      .filter((l) => l.msg === 'TLS handshake failed')
      .map((l) => String(l.authorizationError ?? l.err));
  try {
    const ca = p.read('ca.pem');
    await t.throwsAsync(httpsGet(q.port, { ca }), undefined, 'no client certificate');
    await t.throwsAsync(
      httpsGet(q.port, { ca, cert: p.read('client2.pem'), key: p.read('client2.key') }),
      undefined,
      'a client certificate from another CA',
    );
    await t.throwsAsync(
      httpsGet(q.port, { ca, cert: p.read('expired.pem'), key: p.read('expired.key') }),
      undefined,
      'an expired client certificate',
    );
    await t.throwsAsync(httpGet(q.port), undefined, 'plain HTTP');
    // The client can see a refusal before the server has logged it: wait for the lines.
    await waitFor('the four refusals in the server log', () => refusals().length >= 4).catch(() => undefined);
    const reasons = refusals();
    t.is(reasons.length, 4, reasons.join(' | '));
    t.regex(reasons[0], /peer did not return a certificate/);
    t.is(reasons[1], 'UNABLE_TO_VERIFY_LEAF_SIGNATURE');
    t.is(reasons[2], 'CERT_HAS_EXPIRED');
    t.regex(reasons[3], /http request/);
    const ok = await httpsGet(q.port, { ca, cert: p.read('client.pem'), key: p.read('client.key') });
    t.is(ok.status, 200);
    t.truthy((JSON.parse(ok.body) as { version?: string }).version);
  } finally {
    t.is(await q.stop(), 0);
  }
});

test('certificates are re-read every tls.cert_ttl seconds: new connections get the new one, serving never stops', async (t) => {
  const p = await pki();
  const live = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-tls-live-'));
  const certFile = path.join(live, 'cert.pem');
  const keyFile = path.join(live, 'key.pem');
  // Replaces a file in one step, as certificate renewal tools do.
  const put = (file: string, data: Buffer | string) => {
    fs.writeFileSync(`${file}.tmp`, data);
    fs.renameSync(`${file}.tmp`, file);
  };
  put(certFile, p.read('server-a.pem'));
  put(keyFile, p.read('server-a.key'));
  const serialA = serialOf(p.read('server-a.pem'));
  const serialB = serialOf(p.read('server-b.pem'));
  t.not(serialA, serialB);

  const q = await startQuiver({
    SERVICE__SERVICE__ENABLE_TLS: 'true',
    SERVICE__TLS__CERT: certFile,
    SERVICE__TLS__KEY: keyFile,
    SERVICE__TLS__CERT_TTL: '1',
  });
  const ca = p.read('ca.pem');
  // Requests all along; every one must succeed.
  let running = true;
  const seen: string[] = [];
  const failures: string[] = [];
  const load = (async () => {
    while (running) {
      try {
        const a = await httpsGet(q.port, { ca }, '/healthz');
        if (a.status === 200) seen.push(a.serial);
        else failures.push(`status ${a.status}`);
      } catch (err) {
        failures.push((err as Error).message);
      }
      await sleep(50);
    }
  })();
  try {
    t.is((await httpsGet(q.port, { ca })).serial, serialA);

    // A broken certificate file: the reload fails, the old certificate stays.
    put(certFile, 'not a certificate\n');
    await waitFor('a failed reload', () => q.logLines().some((l) => l.msg === 'TLS certificate reload failed: keeping the current certificate'));
    const failed = q.logLines().find((l) => l.msg === 'TLS certificate reload failed: keeping the current certificate');
    t.regex(String(failed?.err), new RegExp(`tls\\.cert file ${certFile.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
    t.is((await httpsGet(q.port, { ca })).serial, serialA);

    // Certificate B (key first: a cert/key pair that does not match is refused too).
    put(keyFile, p.read('server-b.key'));
    put(certFile, p.read('server-b.pem'));
    // A probe that fails counts as a failure of serving, as the background requests do.
    await waitFor('certificate B', () =>
      httpsGet(q.port, { ca }).then(
        (a) => a.serial === serialB,
        (err: Error) => {
          failures.push(`probe: ${err.message}`);
          return false;
        },
      ),
    );
    await waitFor('the background requests to see certificate B', () => seen.includes(serialB));
    const reloaded = q.logLines().find((l) => l.msg === 'TLS certificate reloaded: new connections use it');
    t.is(reloaded?.serialNumber, serialB);
    t.truthy(reloaded?.validFrom);
    t.truthy(reloaded?.validTo);
    t.false(q.logLines().some((l) => l.msg === 'TLS certificate reloaded: new connections use it' && l.serialNumber !== serialB));
  } finally {
    running = false;
    await load;
    t.is(await q.stop(), 0);
    fs.rmSync(live, { recursive: true, force: true });
  }
  t.deepEqual(failures, []);
  t.true(seen.includes(serialA) && seen.includes(serialB), `served ${seen.length} requests: ${[...new Set(seen)].join(", ")}; A ${serialA}, B ${serialB}`);
});

test('a missing tls.cert file stops start-up (exit 1) with a message naming it', async (t) => {
  const p = await pki();
  const missing = p.file('no-such-cert.pem');
  const run = await runQuiver([], tlsEnv(p, { SERVICE__TLS__CERT: missing }));
  t.is(run.code, 1);
  t.true(run.stderr.includes(`tls.cert file ${missing} does not exist`), run.stderr);
  t.false(run.stdout.includes('REST API listening'));
});

const config = (env: Record<string, string>) => loadConfig({ env: { SERVICE__SERVICE__HOST: '127.0.0.1', ...env } });

test('loadRestTls names the file at fault', async (t) => {
  const p = await pki();
  t.is(await loadRestTls(config({})), null, 'TLS off reads nothing');
  const a = await loadRestTls(config(tlsEnv(p)));
  t.is(a?.facts.serialNumber, serialOf(p.read('server-a.pem')));
  t.is(a?.ca, null, 'tls.ca_cert is only read when client certificates are checked');

  const refused = async (env: Record<string, string>, message: string) => {
    const err = await t.throwsAsync(loadRestTls(config(tlsEnv(p, env))), { instanceOf: TlsSetupError });
    t.is(err?.message.includes(message), true, err?.message);
  };
  await refused(
    { SERVICE__TLS__KEY: p.file('server-b.key') },
    `tls.key file ${p.file('server-b.key')} is not the private key of the certificate in tls.cert file ${p.file('server-a.pem')}`,
  );
  await refused({ SERVICE__TLS__CERT: p.file('openssl.cnf') }, `tls.cert file ${p.file('openssl.cnf')} holds no valid PEM certificate`);
  await refused({ SERVICE__TLS__KEY: p.file('server-a.pem') }, `tls.key file ${p.file('server-a.pem')} holds no usable PEM private key`);
  await refused({ SERVICE__TLS__KEY: p.dir }, `tls.key file ${p.dir} cannot be read (EISDIR)`);
  await refused(
    { SERVICE__SERVICE__VERIFY_HTTPS_CLIENT_CERTIFICATE: 'true', SERVICE__TLS__CA_CERT: p.file('missing-ca.pem') },
    `tls.ca_cert file ${p.file('missing-ca.pem')} does not exist`,
  );
  await refused(
    { SERVICE__SERVICE__VERIFY_HTTPS_CLIENT_CERTIFICATE: 'true', SERVICE__TLS__CA_CERT: p.file('ca.key') },
    `tls.ca_cert file ${p.file('ca.key')} holds no valid PEM certificate`,
  );
});

test('createRestServer: HTTP when TLS is off; the reload timer stops when the server closes', async (t) => {
  const p = await pki();
  const handler: http.RequestListener = (_req, res) => res.end('ok');
  const plain = await createRestServer(config({}), handler, pino({ level: 'silent' }));
  t.false(plain instanceof https.Server);
  stopCertificateReload(plain); // nothing to stop: no throw

  const lines: Array<Record<string, unknown>> = [];
  const logger = pino({ level: 'debug' }, { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
  const server = await createRestServer(config(tlsEnv(p, { SERVICE__TLS__CERT_TTL: '1' })), handler, logger);
  t.true(server instanceof https.Server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const rereads = () => lines.filter((l) => l.msg === 'TLS certificate files unchanged').length;
  await waitFor('a re-read while the server is open', () => rereads() >= 1).catch(() => undefined);
  t.true(rereads() >= 1, 'the files were read again while the server was open');
  // A second server with the same 1 s period stays open as the control: once it has
  // re-read twice after the first one closed, the first one's timer would have fired
  // at least once had it not stopped (a fixed sleep says nothing on a slow machine).
  const controlLines: Array<Record<string, unknown>> = [];
  const controlLogger = pino({ level: 'debug' }, { write: (s: string) => void controlLines.push(JSON.parse(s) as Record<string, unknown>) });
  const control = await createRestServer(config(tlsEnv(p, { SERVICE__TLS__CERT_TTL: '1' })), handler, controlLogger);
  const controlRereads = () => controlLines.filter((l) => l.msg === 'TLS certificate files unchanged').length;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  const after = rereads();
  const controlAfter = controlRereads();
  await waitFor('two re-reads of the control server', () => controlRereads() >= controlAfter + 2);
  t.is(rereads(), after, 'no reload after close');
  stopCertificateReload(control);
});
