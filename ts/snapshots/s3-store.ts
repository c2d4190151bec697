/**
 * Snapshot files in an S3 bucket (`storage.snapshots_config.snapshots_storage: s3`),
 * with the same layout and behaviour as LocalSnapshotStore (store.ts): the object
 * `<dir>/<name>` holds the snapshot and `<dir>/<name>.checksum` its lowercase hex
 * SHA-256 (no newline). Works with AWS and with S3-compatible servers (`endpoint_url`,
 * path-style addressing).
 *
 * Owns: the object keys, streamed multipart upload of a finished local file (memory
 * stays bounded whatever the file size), listing one folder level, streaming objects
 * out, downloading a local copy, mapping a missing object to NotFoundError. Must never:
 * buffer a whole snapshot in memory, list an object of a subfolder or a checksum object
 * as a snapshot, or map errors other than "not found" (the caller does).
 */

import { randomUUID } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

import {
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';

import { NotFoundError } from '../common/errors';
import type { S3Config } from '../config/types';
import { checkSnapshotName, formatCreationTime, type SnapshotDescription, type SnapshotStore } from './store';

/** Size of one multipart part, and how many parts are in flight at once (memory: ~2 × 8 MiB). */
export const S3_PART_SIZE = 8 * 1024 * 1024;
export const S3_QUEUE_SIZE = 2;

/** How many checksum objects `list` reads at once. */
const CHECKSUM_READS = 8;

/** True when the SDK error says the object (or key) does not exist. */
export function isS3NotFound(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const e = err as { name?: string; Code?: string; $metadata?: { httpStatusCode?: number } };
  if (e.name === 'NoSuchBucket') return false; // a configuration error, not a missing snapshot
  return e.name === 'NotFound' || e.name === 'NoSuchKey' || e.Code === 'NoSuchKey' || e.$metadata?.httpStatusCode === 404;
}

/** The S3 client options for a config: explicit keys when given, else the SDK's default chain. */
export function s3ClientConfig(cfg: S3Config): S3ClientConfig {
  const conf: S3ClientConfig = {
    region: cfg.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1',
    // S3-compatible servers mangle streamed (aws-chunked) uploads with the SDK's default
    // checksums; only compute or validate them where the API requires it.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  };
  if (cfg.endpoint_url !== null && cfg.endpoint_url !== '') {
    conf.endpoint = cfg.endpoint_url;
    conf.forcePathStyle = true;
  }
  if (cfg.access_key !== null && cfg.secret_key !== null) {
    conf.credentials = { accessKeyId: cfg.access_key, secretAccessKey: cfg.secret_key };
  }
  return conf;
}

export class S3SnapshotStore implements SnapshotStore {
  readonly kind = 's3' as const;

  constructor(
    readonly client: S3Client,
    readonly bucket: string,
  ) {}

  static create(cfg: S3Config): S3SnapshotStore {
    return new S3SnapshotStore(new S3Client(s3ClientConfig(cfg)), cfg.bucket);
  }

  /** The object key of `dir/name` (the name checked): no leading slash. */
  keyOf(dir: string, name: string): string {
    checkSnapshotName(name);
    const folder = trimSlashes(dir);
    return folder === '' ? name : `${folder}/${name}`;
  }

  async list(dir: string): Promise<SnapshotDescription[]> {
    const folder = trimSlashes(dir);
    const prefix = folder === '' ? '' : `${folder}/`;
    const found: Array<{ name: string; size: number; modified: Date | undefined }> = [];
    let token: string | undefined;
    do {
      const page = await this.client.send(
        new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, Delimiter: '/', ContinuationToken: token }),
      );
      for (const obj of page.Contents ?? []) {
        if (obj.Key === undefined || !obj.Key.startsWith(prefix)) continue;
        const name = obj.Key.slice(prefix.length);
        if (name.includes('/') || !name.endsWith('.snapshot') || !validName(name)) continue;
        found.push({ name, size: obj.Size ?? 0, modified: obj.LastModified });
      }
      token = page.IsTruncated === true ? page.NextContinuationToken : undefined;
    } while (token !== undefined);

    found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const out: SnapshotDescription[] = found.map((f) => ({
      name: f.name,
      creation_time: f.modified === undefined ? null : formatCreationTime(f.modified),
      size: f.size,
    }));
    for (let i = 0; i < out.length; i += CHECKSUM_READS) {
      await Promise.all(
        out.slice(i, i + CHECKSUM_READS).map(async (d) => {
          const sum = await this.readChecksum(`${prefix}${d.name}.checksum`);
          if (sum !== undefined) d.checksum = sum;
        }),
      );
    }
    return out;
  }

  async describe(dir: string, name: string): Promise<SnapshotDescription> {
    const key = this.keyOf(dir, name);
    let head;
    try {
      head = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
    } catch (err) {
      if (isS3NotFound(err)) throw new NotFoundError(`Snapshot ${name} not found`);
      throw err;
    }
    const d: SnapshotDescription = {
      name,
      creation_time: head.LastModified === undefined ? null : formatCreationTime(head.LastModified),
      size: head.ContentLength ?? 0,
    };
    const sum = await this.readChecksum(`${key}.checksum`);
    if (sum !== undefined) d.checksum = sum;
    return d;
  }

  async put(dir: string, name: string, file: string, checksum: string): Promise<SnapshotDescription> {
    try {
      const key = this.keyOf(dir, name);
      // The checksum goes first: a listed snapshot (the second upload completes it) then
      // always has its checksum.
      try {
        await this.client.send(
          new PutObjectCommand({ Bucket: this.bucket, Key: `${key}.checksum`, Body: checksum, ContentType: 'text/plain' }),
        );
        const upload = new Upload({
          client: this.client,
          params: { Bucket: this.bucket, Key: key, Body: createReadStream(file), ContentType: 'application/octet-stream' },
          partSize: S3_PART_SIZE,
          queueSize: S3_QUEUE_SIZE,
          leavePartsOnError: false,
        });
        await upload.done();
      } catch (err) {
        await Promise.all([this.deleteQuietly(key), this.deleteQuietly(`${key}.checksum`)]);
        throw err;
      }
    } finally {
      await fs.rm(file, { force: true });
    }
    return this.describe(dir, name);
  }

  async open(dir: string, name: string): Promise<{ stream: Readable; size: number }> {
    const key = this.keyOf(dir, name);
    let res;
    try {
      res = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
    } catch (err) {
      if (isS3NotFound(err)) throw new NotFoundError(`Snapshot ${name} not found`);
      throw err;
    }
    const body = res.Body;
    // In Node the SDK's body is an http.IncomingMessage (a Readable).
    if (!(body instanceof Readable)) {
      throw new Error(`S3 GetObject for ${key} returned no readable stream`);
    }
    return { stream: body, size: res.ContentLength ?? 0 };
  }

  async delete(dir: string, name: string): Promise<void> {
    await this.describe(dir, name);
    const key = this.keyOf(dir, name);
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
    await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: `${key}.checksum` }));
  }

  async localCopy(dir: string, name: string, tempDir: string): Promise<{ file: string; cleanup(): Promise<void> }> {
    const { stream } = await this.open(dir, name);
    await fs.mkdir(tempDir, { recursive: true });
    const file = path.join(tempDir, `s3-${randomUUID()}-${name}`);
    try {
      await pipeline(stream, createWriteStream(file));
    } catch (err) {
      stream.destroy();
      await fs.rm(file, { force: true });
      throw err;
    }
    return { file, cleanup: () => fs.rm(file, { force: true }) };
  }

  /** Closes the client's connections. */
  close(): void {
    this.client.destroy();
  }

  /** The checksum object's value when present and a lowercase hex SHA-256, else undefined. */
  private async readChecksum(key: string): Promise<string | undefined> {
    let text: string;
    try {
      const res = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      text = res.Body === undefined ? '' : await res.Body.transformToString('utf8');
    } catch (err) {
      if (isS3NotFound(err)) return undefined; // no checksum: the field is left out, as the reference does
      throw err;
    }
    const sum = text.trim();
    return /^[0-9a-f]{64}$/.test(sum) ? sum : undefined;
  }

  private async deleteQuietly(key: string): Promise<void> {
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
    } catch {
      // best effort: the original error is what the caller needs
    }
  }
}

function trimSlashes(dir: string): string {
  return dir.replace(/^\/+|\/+$/g, '');
}

function validName(name: string): boolean {
  try {
    checkSnapshotName(name);
    return true;
  } catch {
    return false;
  }
}
