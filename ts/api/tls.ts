/**
 * The REST API's server: plain HTTP, or HTTPS when `service.enable_tls` is true.
 *
 * HTTPS serves `tls.cert` (a PEM chain) with `tls.key`. With
 * `service.verify_https_client_certificate` the server also demands a client
 * certificate signed by `tls.ca_cert` and drops the connection without one (no HTTP
 * answer at all, like the reference). Every `tls.cert_ttl` seconds the three files are
 * read again and, when they changed and still form a valid set, the server switches to
 * them for new connections (connections already open keep theirs); a set that fails
 * to load is logged and the current one stays.
 *
 * Owns: reading and checking the certificate files, the reload timer. Must never: bind
 * a port or close the server (the node does), or exit the process.
 */

import { createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as path from 'node:path';
import * as tls from 'node:tls';
import type { Logger } from 'pino';

import type { Config } from '../config/types';

/** A certificate file that is missing, unreadable or invalid; the node turns it into a StartupError. */
export class TlsSetupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TlsSetupError';
  }
}

/** What the log says about the served certificate. */
export interface CertificateFacts {
  subject: string;
  issuer: string;
  serialNumber: string;
  validFrom: string;
  validTo: string;
  fingerprint256: string;
}

/** The checked contents of the certificate files. */
export interface RestTlsMaterial {
  cert: Buffer;
  key: Buffer;
  /** Only read when client certificates are verified. */
  ca: Buffer | null;
  facts: CertificateFacts;
}

/** setTimeout cannot wait longer than this (a longer delay fires after 1 ms). */
const MAX_TIMER_MS = 2 ** 31 - 1;

type FileKey = 'cert' | 'key' | 'ca_cert';

async function readTlsFile(config: Config, key: FileKey): Promise<{ file: string; data: Buffer }> {
  const file = path.resolve(config.tls[key]);
  try {
    return { file, data: await fsp.readFile(file) };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const why = e.code === 'ENOENT' ? 'does not exist' : `cannot be read (${e.code ?? e.message})`;
    throw new TlsSetupError(`tls.${key} file ${file} ${why}`);
  }
}

function parseCertificate(key: FileKey, file: string, data: Buffer): X509Certificate {
  try {
    return new X509Certificate(data);
  } catch (err) {
    throw new TlsSetupError(`tls.${key} file ${file} holds no valid PEM certificate: ${(err as Error).message}`);
  }
}

/**
 * Reads and checks the files HTTPS needs: tls.cert and tls.key (a certificate and its
 * private key), and tls.ca_cert when client certificates are verified. Null when TLS is
 * off. Throws TlsSetupError naming the file at fault.
 */
export async function loadRestTls(config: Config): Promise<RestTlsMaterial | null> {
  if (!config.service.enable_tls) return null;
  const verify = config.service.verify_https_client_certificate;
  const [cert, key, ca] = await Promise.all([
    readTlsFile(config, 'cert'),
    readTlsFile(config, 'key'),
    verify ? readTlsFile(config, 'ca_cert') : Promise.resolve(null),
  ]);

  const x509 = parseCertificate('cert', cert.file, cert.data);
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey(key.data);
  } catch (err) {
    throw new TlsSetupError(`tls.key file ${key.file} holds no usable PEM private key: ${(err as Error).message}`);
  }
  if (privateKey.asymmetricKeyType !== x509.publicKey.asymmetricKeyType || !x509.checkPrivateKey(privateKey)) {
    throw new TlsSetupError(
      `tls.key file ${key.file} is not the private key of the certificate in tls.cert file ${cert.file}`,
    );
  }
  if (ca !== null) parseCertificate('ca_cert', ca.file, ca.data);
  try {
    tls.createSecureContext({ cert: cert.data, key: key.data, ...(ca !== null ? { ca: ca.data } : {}) });
  } catch (err) {
    throw new TlsSetupError(
      `tls.cert file ${cert.file} and tls.key file ${key.file} cannot be used: ${(err as Error).message}`,
    );
  }

  return {
    cert: cert.data,
    key: key.data,
    ca: ca?.data ?? null,
    facts: {
      subject: x509.subject,
      issuer: x509.issuer,
      serialNumber: x509.serialNumber,
      validFrom: x509.validFrom,
      validTo: x509.validTo,
      fingerprint256: x509.fingerprint256,
    },
  };
}

function warnIfNotValidNow(facts: CertificateFacts, logger: Logger): void {
  const now = Date.now();
  if (Date.parse(facts.validTo) < now) logger.warn(facts, 'the TLS certificate in tls.cert has expired');
  else if (Date.parse(facts.validFrom) > now) logger.warn(facts, 'the TLS certificate in tls.cert is not valid yet');
}

function sameMaterial(a: RestTlsMaterial, b: RestTlsMaterial): boolean {
  return a.cert.equals(b.cert) && a.key.equals(b.key) && (a.ca === null ? b.ca === null : b.ca !== null && a.ca.equals(b.ca));
}

const reloadStoppers = new WeakMap<http.Server, () => void>();

/** Stops the certificate reload of a server createRestServer made (also happens on its 'close'). Idempotent. */
export function stopCertificateReload(server: http.Server): void {
  reloadStoppers.get(server)?.();
}

/**
 * The REST server for `handler`: HTTP, or HTTPS with the certificate files (read now
 * unless `preloaded`, from loadRestTls, is given) and their periodic reload. It does
 * not listen yet. Throws TlsSetupError when a certificate file is unusable.
 */
export async function createRestServer(
  config: Config,
  handler: http.RequestListener,
  logger: Logger,
  preloaded?: RestTlsMaterial | null,
): Promise<http.Server> {
  if (!config.service.enable_tls) return http.createServer(handler);
  const material = preloaded ?? (await loadRestTls(config));
  if (material === null) throw new TlsSetupError('service.enable_tls is true but no certificate was loaded');
  const verify = config.service.verify_https_client_certificate;

  const server = https.createServer(
    {
      cert: material.cert,
      key: material.key,
      ...(verify ? { ca: material.ca ?? undefined, requestCert: true, rejectUnauthorized: true } : {}),
    },
    handler,
  );
  // A failed handshake (plain HTTP on this port, a missing or untrusted client
  // certificate) is the client's problem: Node drops the socket; note it for debugging.
  // A refused client certificate surfaces as "socket hang up": the reason is in
  // authorizationError (CERT_HAS_EXPIRED, UNABLE_TO_VERIFY_LEAF_SIGNATURE, ...).
  server.on('tlsClientError', (err, socket) =>
    logger.debug(
      { err: err.message, authorizationError: socket.authorizationError, remoteAddress: socket.remoteAddress },
      'TLS handshake failed',
    ),
  );
  logger.info({ ...material.facts, verifyClientCertificate: verify }, 'HTTPS enabled for the REST API');
  warnIfNotValidNow(material.facts, logger);
  scheduleReload(server, config, logger, material);
  return server;
}

function scheduleReload(server: https.Server, config: Config, logger: Logger, initial: RestTlsMaterial): void {
  const stop = watchTlsFiles(config, logger, initial, (next) =>
    server.setSecureContext({
      cert: next.cert,
      key: next.key,
      ...(next.ca !== null ? { ca: next.ca } : {}),
    }),
  );
  server.once('close', stop);
  reloadStoppers.set(server, stop);
}

/**
 * Reads the certificate files again every `tls.cert_ttl` seconds and calls `apply` with
 * a set that changed and still loads (REST's HTTPS server and the gRPC API both switch to
 * it for new connections); a set that fails to load is logged and the current one stays.
 * Returns the function that stops the timer.
 */
export function watchTlsFiles(config: Config, logger: Logger, initial: RestTlsMaterial, apply: (next: RestTlsMaterial) => void): () => void {
  const periodMs = Math.min(config.tls.cert_ttl * 1000, MAX_TIMER_MS);
  let current = initial;
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;

  const reload = async () => {
    timer = null;
    try {
      const next = await loadRestTls(config);
      if (stopped || next === null) return;
      if (sameMaterial(current, next)) {
        logger.debug({ serialNumber: next.facts.serialNumber }, 'TLS certificate files unchanged');
      } else {
        apply(next);
        current = next;
        logger.info(next.facts, 'TLS certificate reloaded: new connections use it');
        warnIfNotValidNow(next.facts, logger);
      }
    } catch (err) {
      logger.warn(
        { err: (err as Error).message, serialNumber: current.facts.serialNumber },
        'TLS certificate reload failed: keeping the current certificate',
      );
    } finally {
      schedule();
    }
  };
  // One reload at a time: the next one is planned when this one ends.
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => void reload(), periodMs);
    timer.unref();
  };
  schedule();
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    timer = null;
  };
}
