/**
 * The sparse vectors of one name in one shard: one engine SparseIndex (an inverted
 * index, exact search) holding every point that carries the vector.
 *
 * Owns: the labels that carry the vector (`present`, for `has_vector` filters), the
 * index file of a checkpoint (`sparse-<i>-<seq>-<n>.qsi`, written only when the index
 * changed since the last one), the per-search choice between the posting lists and a
 * direct scan of a small allow-list (`full_scan_threshold`, in points as in the
 * reference), and the IDF flag (`modifier: idf`). Must never: decide durability (the
 * shard's WAL does) or run a mutation outside the shard's update lock.
 *
 * Values are stored in the index in the spec's datatype (4, 2 or 1 bytes each; see
 * SparseIndexOptions.datatype for the conversions), so reads and scores are those of
 * the converted values. A loaded index file keeps the datatype it was written with.
 */

import * as path from 'node:path';

import type { Engine, SparseIndex } from '../../bindings/engine';
import { LabelSet } from './label-set';
import type { SparseVec } from './operations';
import type { Hit } from './vector-store';

export type SparseDatatype = 'float32' | 'float16' | 'uint8';

/** What the index of one sparse vector name is searched with. */
export interface SparseSpec {
  name: string;
  /** A filtered search allowing fewer points than this scans them directly. */
  fullScanThreshold: number;
  /** `modifier: idf`: query values are weighted by inverse document frequency. */
  idf: boolean;
  datatype: SparseDatatype;
}

/** The reference's default `full_scan_threshold` of a sparse index (points). */
export const DEFAULT_SPARSE_FULL_SCAN_THRESHOLD = 5000;

export const SPARSE_FILE_RE = /^sparse-[0-9]{1,9}-[0-9]{1,20}-[0-9]{1,15}\.qsi$/;

/** The largest finite float16. */
export const F16_MAX = 65504;

export class SparseStore {
  private index: SparseIndex;
  /** Labels that carry this vector. */
  readonly present = new LabelSet();
  private gen = 1;
  private savedGen = 0;
  private savedFile: string | null = null;

  constructor(
    private readonly engine: Engine,
    readonly spec: SparseSpec,
  ) {
    // The store decides full scans itself (the threshold may change with the config).
    this.index = engine.createSparseIndex({ fullScanThreshold: 0, datatype: spec.datatype });
  }

  /**
   * Loads the index file of a checkpoint (replacing the empty index). A file of another
   * datatype (one written before sparse indexes stored their datatype loads as float32)
   * is converted into the spec's datatype, and the next checkpoint rewrites it.
   */
  async load(dir: string, file: string): Promise<void> {
    let loaded = await this.engine.loadSparseIndex(path.join(dir, file));
    const labels = await loaded.labels();
    let converted = false;
    if ((await loaded.stats()).datatype !== this.spec.datatype) {
      const typed = this.engine.createSparseIndex({ fullScanThreshold: 0, datatype: this.spec.datatype });
      try {
        if (labels.length > 0) await typed.upsert(await loaded.get(labels));
      } catch (err) {
        typed.close();
        loaded.close();
        throw err;
      }
      loaded.close();
      loaded = typed;
      converted = true;
    }
    this.index.close();
    this.index = loaded;
    for (const l of labels) this.present.add(l);
    this.savedFile = file;
    this.gen = converted ? 2 : 1;
    this.savedGen = 1;
  }

  /** Inserts or replaces the vectors of `labels`. */
  async upsert(labels: bigint[], vecs: SparseVec[]): Promise<void> {
    if (labels.length === 0) return;
    let total = 0;
    for (const v of vecs) total += v.indices.length;
    const offsets = new Uint32Array(labels.length + 1);
    const indices = new Uint32Array(total);
    const values = new Float32Array(total);
    let at = 0;
    vecs.forEach((v, i) => {
      indices.set(v.indices, at);
      values.set(v.values, at);
      at += v.indices.length;
      offsets[i + 1] = at;
    });
    this.gen++;
    await this.index.upsert({ labels: BigUint64Array.from(labels), offsets, indices, values });
    for (const l of labels) this.present.add(l);
  }

  /** Removes the vectors of those of `labels` that carry one. */
  async delete(labels: BigUint64Array): Promise<void> {
    const held = labels.filter((l) => this.present.has(l));
    if (held.length === 0) return;
    this.gen++;
    for (const l of held) this.present.delete(l);
    await this.index.delete(held);
  }

  /** The stored vector of `label`, or null. */
  async get(label: bigint): Promise<SparseVec | null> {
    if (!this.present.has(label)) return null;
    const b = await this.index.get(BigUint64Array.of(label));
    if (b.labels.length === 0) return null;
    return { indices: b.indices, values: b.values };
  }

  /**
   * Exact top `k` by dot product among the points sharing a dimension with `query`
   * (weighted by IDF when the spec says so), ties by label; `allow` null = no filter.
   */
  async search(query: SparseVec, k: number, allow: BigUint64Array | null): Promise<Hit[]> {
    if (k === 0 || this.present.size === 0) return [];
    const exact = allow !== null && allow.length < this.spec.fullScanThreshold;
    const r = await this.index.search(query.indices, query.values, { k, allow: allow ?? undefined, idf: this.spec.idf, exact });
    const out: Hit[] = new Array(r.labels.length);
    for (let i = 0; i < r.labels.length; i++) out[i] = { label: r.labels[i], score: r.scores[i] };
    return out;
  }

  /** Index memory and counts, for telemetry and the benchmark. */
  stats(): ReturnType<SparseIndex['stats']> {
    return this.index.stats();
  }

  changedSinceSave(): boolean {
    return this.gen !== this.savedGen;
  }

  /** Writes the index for a checkpoint at `seq` when it changed; returns its file name. */
  async save(dir: string, prefix: string, seq: bigint, fileNo: number): Promise<string> {
    if (this.savedFile !== null && !this.changedSinceSave()) return this.savedFile;
    const gen = this.gen;
    const file = `${prefix}${seq}-${fileNo}.qsi`;
    await this.index.save(path.join(dir, file));
    this.savedGen = gen;
    this.savedFile = file;
    return file;
  }

  close(): void {
    this.index.close();
  }
}
