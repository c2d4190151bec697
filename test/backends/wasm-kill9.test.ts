// test/crash/kill9.test.ts on the WASM engine backend (see test/support/backend.ts).
import { runOnBackend } from '../support/backend';

runOnBackend('wasm', 'crash/kill9.test', { QUIVER_CRASH_CYCLES: '3' });
