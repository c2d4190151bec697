// test/shard/sparse-store.test.ts on the WASM engine backend (see test/support/backend.ts).
import { runOnBackend } from '../support/backend';

runOnBackend('wasm', 'shard/sparse-store.test');
