/**
 * The state of one replica of a shard, as consensus records it (SPEC 3.1; the
 * reference's full list in reference/qdrant-notes.md, section 4).
 *
 * Owns: the closed list of states and what each allows: whether a replica counts as
 * active (a source of truth), takes writes, serves reads. Routing (ReplicaSet) asks
 * these predicates and never compares state names itself. Must never: change a state
 * (every transition is a consensus operation, ts/cluster/state.ts).
 */

export type ReplicaState =
  /** Healthy: takes writes, serves reads, is a source of truth. */
  | 'Active'
  /** Failed to apply a write or to answer: no traffic until it is recovered. */
  | 'Dead'
  /** Receiving a shard transfer: takes writes (they follow the transferred data), serves no reads. */
  | 'Partial'
  /** Created with its collection, not confirmed active yet: takes writes. */
  | 'Initializing'
  /** On a listener node: takes writes, serves no reads. */
  | 'Listener'
  /** Receiving a snapshot transfer (older transfer protocol): neither writes nor reads. */
  | 'PartialSnapshot'
  /** Being recovered from outside (snapshot or WAL delta transfer): neither writes nor reads. */
  | 'Recovery'
  /** Receiving points of a resharding: takes writes, serves no reads. */
  | 'Resharding'
  /** Being drained by a scale-down resharding: still active for reads and writes. */
  | 'ReshardingScaleDown'
  /** Serves reads, but takes writes as a partial replica does. */
  | 'ActiveRead'
  /** Its data was replaced by a snapshot upload: no writes, no reads, kept on restart. */
  | 'ManualRecovery';

export const REPLICA_STATES: readonly ReplicaState[] = [
  'Active',
  'Dead',
  'Partial',
  'Initializing',
  'Listener',
  'PartialSnapshot',
  'Recovery',
  'Resharding',
  'ReshardingScaleDown',
  'ActiveRead',
  'ManualRecovery',
];

/** A source of truth: what a shard must keep at least one of. */
export function isActive(s: ReplicaState): boolean {
  return s === 'Active' || s === 'ReshardingScaleDown';
}

/** Whether writes to the shard are sent to this replica. */
export function acceptsWrites(s: ReplicaState): boolean {
  switch (s) {
    case 'Active':
    case 'Partial':
    case 'Initializing':
    case 'Listener':
    case 'Resharding':
    case 'ReshardingScaleDown':
    case 'ActiveRead':
      return true;
    case 'Dead':
    case 'PartialSnapshot':
    case 'Recovery':
    case 'ManualRecovery':
      return false;
  }
}

/** Whether reads of the shard may be answered by this replica. */
export function servesReads(s: ReplicaState): boolean {
  return s === 'Active' || s === 'ReshardingScaleDown' || s === 'ActiveRead';
}
