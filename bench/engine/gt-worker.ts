/**
 * Worker of the brute-force ground truth: exact top-k for a range of queries.
 * Vectors arrive in SharedArrayBuffers (Cosine data already normalised, so the
 * distance is 1 - dot; Euclid uses the squared L2 distance).
 */
import { parentPort, workerData } from 'worker_threads';

export interface GtJob {
  base: SharedArrayBuffer;
  queries: SharedArrayBuffer;
  dim: number;
  nBase: number;
  k: number;
  metric: 'cos' | 'l2';
  qStart: number;
  qEnd: number;
}

export function exactTopK(job: GtJob, base: Float32Array, queries: Float32Array): { ids: Int32Array; dists: Float64Array } {
  const { dim, nBase, k, metric, qStart, qEnd } = job;
  const nq = qEnd - qStart;
  const ids = new Int32Array(nq * k);
  const dists = new Float64Array(nq * k);
  const topD = new Float64Array(k);
  const topI = new Int32Array(k);
  const q = new Float64Array(dim);
  const dim4 = dim - (dim % 4);
  for (let qi = qStart; qi < qEnd; qi++) {
    for (let j = 0; j < dim; j++) q[j] = queries[qi * dim + j];
    topD.fill(Infinity);
    topI.fill(-1);
    let worst = Infinity;
    for (let b = 0; b < nBase; b++) {
      const off = b * dim;
      let d: number;
      if (metric === 'cos') {
        let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        let j = 0;
        for (; j < dim4; j += 4) {
          s0 += q[j] * base[off + j];
          s1 += q[j + 1] * base[off + j + 1];
          s2 += q[j + 2] * base[off + j + 2];
          s3 += q[j + 3] * base[off + j + 3];
        }
        for (; j < dim; j++) s0 += q[j] * base[off + j];
        d = 1 - (s0 + s1 + s2 + s3);
      } else {
        let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        let j = 0;
        for (; j < dim4; j += 4) {
          const a0 = q[j] - base[off + j];
          const a1 = q[j + 1] - base[off + j + 1];
          const a2 = q[j + 2] - base[off + j + 2];
          const a3 = q[j + 3] - base[off + j + 3];
          s0 += a0 * a0;
          s1 += a1 * a1;
          s2 += a2 * a2;
          s3 += a3 * a3;
        }
        for (; j < dim; j++) {
          const a = q[j] - base[off + j];
          s0 += a * a;
        }
        d = s0 + s1 + s2 + s3;
      }
      if (d < worst) {
        let p = k - 1;
        while (p > 0 && topD[p - 1] > d) {
          topD[p] = topD[p - 1];
          topI[p] = topI[p - 1];
          p--;
        }
        topD[p] = d;
        topI[p] = b;
        worst = topD[k - 1];
      }
    }
    ids.set(topI, (qi - qStart) * k);
    dists.set(topD, (qi - qStart) * k);
  }
  return { ids, dists };
}

if (parentPort && workerData && (workerData as { gtJob?: GtJob }).gtJob) {
  const job = (workerData as { gtJob: GtJob }).gtJob;
  const res = exactTopK(job, new Float32Array(job.base), new Float32Array(job.queries));
  parentPort.postMessage(res, [res.ids.buffer as ArrayBuffer, res.dists.buffer as ArrayBuffer]);
}
