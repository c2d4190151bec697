// test/shard/local-shard.test.ts on the WASM engine backend (see test/support/backend.ts).
import { runOnBackend } from '../support/backend';

runOnBackend('wasm', 'shard/local-shard.test');
