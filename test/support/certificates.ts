// Throwaway TLS certificates for tests that run a TLS server on loopback: a CA, and a server
// certificate it signs for the names given, made with openssl in a directory the test owns. Files:
// ca.crt, ca.key, server.crt, server.key (and, when asked, other.crt: a CA nobody used, to show a
// wrong one is refused).
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface TestCertificateOptions {
  /** The server certificate's common name. */
  commonName: string;
  /** Its subjectAltName entries, e.g. ['DNS:localhost', 'IP:127.0.0.1']. */
  altNames: readonly string[];
  /** The CA's common name. */
  caName?: string;
  /** Also make other.crt, a CA that signed nothing. */
  otherCa?: boolean;
}

export function makeTestCertificates(into: string, options: TestCertificateOptions): void {
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: into, stdio: 'ignore' });
  openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '1', '-subj', `/CN=${options.caName ?? 'agentgate test CA'}`);
  openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', `/CN=${options.commonName}`);
  writeFileSync(join(into, 'san.ext'), `subjectAltName=${options.altNames.join(',')}\n`);
  openssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.crt', '-days', '1', '-extfile', 'san.ext');
  if (options.otherCa) openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'other.key', '-out', 'other.crt', '-days', '1', '-subj', '/CN=another CA');
}
