/**
 * The options of a point request, read from its query string: what a write and a read
 * carry to the collection (wait, ordering, timeout; consistency, timeout), with the
 * reference's defaults, and one shared object for a read that names none.
 */

import test from 'ava';

import { readParams, writeParams } from '../../ts/api/request/parse';
import { DEFAULT_READ } from '../../ts/collection/replica';

test('a write carries wait, ordering and timeout; defaults wait=false, ordering=weak, no timeout', (t) => {
  t.deepEqual(writeParams({ query: {} }), { wait: false, ordering: 'weak', timeout: null });
  t.deepEqual(writeParams({ query: { wait: 'true', ordering: 'strong', timeout: '12' } }), { wait: true, ordering: 'strong', timeout: 12 });
  // 0 is "the default"; more than an hour is an hour.
  t.is(writeParams({ query: { timeout: '0' } }).timeout, null);
  t.is(writeParams({ query: { timeout: '99999' } }).timeout, 3600);
  t.throws(() => writeParams({ query: { ordering: 'fast' } }), { message: /^Deserialize error in query parameters: ordering: unknown variant `fast`/ });
});

test('a read carries consistency and timeout; without either it is the shared default (factor 1)', (t) => {
  t.is(readParams({ query: {} }), DEFAULT_READ);
  t.deepEqual(DEFAULT_READ, { consistency: { factor: 1 }, timeout: null });
  t.deepEqual(readParams({ query: { consistency: '3' } }), { consistency: { factor: 3 }, timeout: null });
  t.deepEqual(readParams({ query: { consistency: 'majority', timeout: '5' } }), { consistency: 'majority', timeout: 5 });
  t.deepEqual(readParams({ query: { timeout: '2' } }), { consistency: { factor: 1 }, timeout: 2 });
  for (const c of ['quorum', 'all']) t.deepEqual(readParams({ query: { consistency: c } }).consistency, c);
  t.throws(() => readParams({ query: { consistency: '0' } }), { message: /consistency: expected a positive integer/ });
});
