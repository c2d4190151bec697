// test/crash/sparse-restart.test.ts on the WASM engine backend (see test/support/backend.ts).
import { runOnBackend } from '../support/backend';

runOnBackend('wasm', 'crash/sparse-restart.test');
