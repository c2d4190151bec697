/**
 * A test PKI made with `openssl` in a temporary folder: a CA, server certificates A and
 * B for 127.0.0.1, one for a pod's DNS name (`server-dns`), a client certificate, one from a second CA (`ca2`, `client2`) and an
 * expired client certificate. Used by the HTTPS tests (test/api/tls.test.ts) and the
 * gRPC TLS tests (test/grpc/tls.test.ts).
 */

import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);

const OPENSSL_CNF = `
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = CA:FALSE
subjectAltName = IP:127.0.0.1
extendedKeyUsage = serverAuth
[server_dns_ext]
basicConstraints = CA:FALSE
subjectAltName = DNS:quiver-0.quiver-headless.ns.svc.cluster.local
extendedKeyUsage = serverAuth
[client_ext]
basicConstraints = CA:FALSE
extendedKeyUsage = clientAuth
[ca]
default_ca = signer
[signer]
database = index.txt
new_certs_dir = issued
serial = serial
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
[any]
commonName = supplied
`;

export interface Pki {
  dir: string;
  /** Absolute path of a file in the PKI folder. */
  file(name: string): string;
  read(name: string): Buffer;
}

export async function makePki(): Promise<Pki> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-tls-'));
  fs.writeFileSync(path.join(dir, 'openssl.cnf'), OPENSSL_CNF);
  fs.writeFileSync(path.join(dir, 'index.txt'), '');
  fs.writeFileSync(path.join(dir, 'serial'), '1000\n');
  fs.mkdirSync(path.join(dir, 'issued'));
  const openssl = (args: string[]) => execFileP('openssl', args, { cwd: dir });
  const newKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];

  const ca = (name: string, cn: string) =>
    openssl(['req', '-x509', '-config', 'openssl.cnf', ...newKey, '-keyout', `${name}.key`, '-out', `${name}.pem`,
      '-days', '3', '-subj', `/CN=${cn}`, '-extensions', 'ca_ext']);
  // `openssl ca` (not `x509 -req`) because it takes explicit -startdate/-enddate: OpenSSL
  // 3.0 has no -not_before/-not_after and refuses a negative -days. Run one at a time
  // (they share the serial file and index).
  const leaf = async (name: string, cn: string, signer: string, ext: string, dates: string[] = ['-days', '3']) => {
    await openssl(['req', '-new', '-config', 'openssl.cnf', ...newKey, '-keyout', `${name}.key`, '-out', `${name}.csr`,
      '-subj', `/CN=${cn}`]);
    await openssl(['ca', '-batch', '-config', 'openssl.cnf', '-cert', `${signer}.pem`, '-keyfile', `${signer}.key`,
      '-in', `${name}.csr`, '-out', `${name}.pem`, '-extensions', ext, '-notext', ...dates]);
  };
  await Promise.all([ca('ca', 'Quiver Test CA'), ca('ca2', 'Other Test CA')]);
  await leaf('server-a', 'quiver-a', 'ca', 'server_ext');
  await leaf('server-b', 'quiver-b', 'ca', 'server_ext');
  // A pod's DNS name only (the Helm chart's preStop hook checks it while talking to localhost).
  await leaf('server-dns', 'quiver-0', 'ca', 'server_dns_ext');
  await leaf('client', 'good-client', 'ca', 'client_ext');
  await leaf('client2', 'foreign-client', 'ca2', 'client_ext');
  await leaf('expired', 'expired-client', 'ca', 'client_ext', ['-startdate', '20200101000000Z', '-enddate', '20200102000000Z']);
  return {
    dir,
    file: (name) => path.join(dir, name),
    read: (name) => fs.readFileSync(path.join(dir, name)),
  };
}

