/**
 * A JSON reader for request bodies heavy in numbers (upserts: a thousand vectors of
 * decimals per request), where V8's JSON.parse spends most of its time converting
 * decimal text to doubles.
 *
 * Owns: reading a UTF-8 body into exactly the value JSON.parse gives for it, or saying
 * it will not (`undefined`), in which case the caller parses with JSON.parse (and gets
 * its result or its error). Must never: return a value that differs from JSON.parse's
 * in any way (numbers to the last bit, -0, key order, duplicate keys, `__proto__` keys),
 * accept text JSON.parse refuses, or throw.
 *
 * Numbers of at most 15 significant digits without an exponent are converted as
 * mantissa / 10^fraction-digits: both are exact doubles and IEEE division rounds
 * correctly, so the quotient is the correctly rounded value of the decimal, as
 * JSON.parse's is. Other numbers go through Number(), which rounds correctly too; past
 * SLOW_NUMBERS of them the reader gives up.
 * Strings with escapes or control characters, and anything unusual, make it give up: so
 * a lone UTF-16 surrogate, which only a `\u` escape can put in a string (UTF-8 decoding
 * never yields one), never passes through here; body.ts refuses it after JSON.parse.
 *
 * With `places` naming where a body's dense vectors are (`'point-writes'`:
 * `{"points": [{"vector": ...}]}` and `{"batch": {"vectors": ...}}`; `'queries'`: the
 * query or search vector of `/points/query` and `/points/search` and of their batches'
 * `searches`, see QUERY_KEYS), the vectors there — arrays of plain decimals — are read
 * straight into Float32Arrays: each element is the float32 that
 * Math.fround(JSON.parse's double) gives, to the bit (see `f32Array`). A vector in any
 * other form (whitespace, exponents, more than 19 significant digits, nested arrays,
 * non-numbers) is read as JSON.parse would read it, and the request parser
 * decides about it as before.
 */

const POW10: number[] = Array.from({ length: 23 }, (_, i) => 10 ** i);

/**
 * Numbers the reader converts with Number() (more than 15 significant digits, or an
 * exponent; vectors read as float32 aside) before it leaves the body to JSON.parse:
 * Number() of a slice costs several times what JSON.parse spends on a number.
 */
const SLOW_NUMBERS = 256;

/** No value: the reader gave up and JSON.parse should decide. */
const GIVE_UP = Symbol('give up');

/** The bits of one double (little-endian words: [0] low, [1] sign, exponent and the mantissa's top 20 bits). */
const F64 = new Float64Array(1);
const F64_WORDS = new Uint32Array(F64.buffer);
/**
 * Floats per arena of a body's vectors (1 MiB): the vectors read as float32 are views
 * of a few shared arrays rather than a thousand small ones (which cost the collector
 * far more); a body smaller than that gets an arena of its size.
 */
const ARENA_FLOATS = 256 * 1024;

/** A double's exponent field (in the high word) from which a float32 is a normal number (2^-126), and from which on the approximation is not used (2^127). */
const F32_NORMAL_MIN_HI = (1023 - 126) << 20;
const F32_NORMAL_MAX_HI = (1023 + 127) << 20;
/** The low 29 bits of a double that float32 drops: this pattern is halfway between two floats. */
const F32_HALF = 0x1000_0000;
/**
 * How close (in units of the double's last place) an approximate value may come to a
 * float32 halfway point before it is read exactly instead. The approximation's error is
 * below 12 units (see f32Array); 256 leaves room to spare.
 */
const F32_MARGIN = 256;

class Reader {
  pos = 0;
  /** Arrays and objects open at the position. */
  depth = 0;
  /** The body's bytes as little-endian words (f32Array reads digits eight at a time). */
  private readonly words: DataView;
  /** Numbers read through Number() so far. */
  private slowNumbers = 0;
  /** Where vectors read as float32 go: each gets a view of its values (see vector()). */
  private arena: Float32Array | null = null;
  private used = 0;

  constructor(
    readonly b: Uint8Array,
    /** Where the body's dense vectors are read as Float32Arrays (see the module's comment). */
    readonly places: VectorPlaces,
    /** More arrays and objects open at once than this: the reader gives up (and the caller's depth check refuses the body). */
    readonly maxDepth: number,
  ) {
    this.words = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }

  /** The top-level value: a point write's or a query's body object gets its vectors read as float32 when asked. */
  top(): unknown {
    this.skipWs();
    if (this.places !== 'none' && this.b[this.pos] === 0x7b) return this.object(this.places === 'queries' ? QUERY_KEYS : TOP_KEYS);
    return this.value();
  }

  skipWs(): void {
    const b = this.b;
    let p = this.pos;
    for (;;) {
      const c = b[p];
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) p++;
      else break;
    }
    this.pos = p;
  }

  value(): unknown {
    this.skipWs();
    const c = this.b[this.pos];
    if (c === 0x5b) return this.array();
    if (c === 0x7b) return this.object();
    if (c === 0x22) return this.string();
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      const v = this.number();
      return v === v ? v : GIVE_UP;
    }
    if (c === 0x74) return this.literal('true', true);
    if (c === 0x66) return this.literal('false', false);
    if (c === 0x6e) return this.literal('null', null);
    return GIVE_UP;
  }

  literal(text: string, v: unknown): unknown {
    const b = this.b;
    for (let i = 0; i < text.length; i++) if (b[this.pos + i] !== text.charCodeAt(i)) return GIVE_UP;
    this.pos += text.length;
    return v;
  }

  array(): unknown {
    if (++this.depth > this.maxDepth) return GIVE_UP;
    const v = this.arrayRest();
    this.depth--;
    return v;
  }

  private arrayRest(): unknown {
    this.pos++; // [
    this.skipWs();
    if (this.b[this.pos] === 0x5d) {
      this.pos++;
      return [];
    }
    const c0 = this.b[this.pos];
    return c0 === 0x2d || (c0 >= 0x30 && c0 <= 0x39) ? this.numbers() : this.values();
  }

  /**
   * The rest of an array that starts with a number (a vector). The common shape — plain
   * decimals separated by bare commas — is read in one tight loop here; a number in
   * another form, whitespace, or a non-number element hands the rest to `number` and
   * `values`.
   */
  numbers(): unknown {
    const out: number[] = [];
    const b = this.b;
    let p = this.pos;
    for (;;) {
      // Inline fast form: -?(0|[1-9][0-9]*)(.[0-9]+)? with at most 15 significant digits.
      const start = p;
      let c = b[p];
      const negative = c === 0x2d;
      if (negative) c = b[++p];
      let mantissa = 0;
      let digits = 0;
      let ok = true;
      if (c === 0x30) {
        c = b[++p];
      } else if (c >= 0x31 && c <= 0x39) {
        do {
          mantissa = mantissa * 10 + (c - 0x30);
          digits++;
          c = b[++p];
        } while (c >= 0x30 && c <= 0x39);
      } else ok = false;
      let fraction = 0;
      if (ok && c === 0x2e) {
        c = b[++p];
        if (c >= 0x30 && c <= 0x39) {
          do {
            mantissa = mantissa * 10 + (c - 0x30);
            if (mantissa !== 0) digits++;
            fraction++;
            c = b[++p];
          } while (c >= 0x30 && c <= 0x39);
        } else ok = false;
      }
      let v: number;
      if (ok && digits <= 15 && fraction <= 22 && (c === 0x2c || c === 0x5d)) {
        v = fraction === 0 ? mantissa : mantissa / POW10[fraction];
        if (negative) v = -v;
      } else {
        // Anything else (exponents, long mantissas, leading zeros, whitespace): the general reader.
        this.pos = start;
        v = this.number();
        if (v !== v) return GIVE_UP;
        p = this.pos;
        c = b[p];
      }
      out.push(v);
      if (c === 0x2c) {
        c = b[++p];
        if (c === 0x2d || (c >= 0x30 && c <= 0x39)) continue;
        // Something other than a number (or whitespace): the general loop takes over.
        this.pos = p;
        const rest = this.values();
        if (rest === GIVE_UP) return GIVE_UP;
        for (const x of rest as unknown[]) out.push(x as number);
        return out;
      }
      if (c === 0x5d) {
        this.pos = p + 1;
        return out;
      }
      this.pos = p;
      this.skipWs();
      c = b[this.pos++];
      if (c === 0x5d) return out;
      if (c !== 0x2c) return GIVE_UP;
      const rest = this.values();
      if (rest === GIVE_UP) return GIVE_UP;
      for (const x of rest as unknown[]) out.push(x as number);
      return out;
    }
  }

  /** Array elements from the current position (after `[` or a comma) to the closing `]`. */
  values(): unknown {
    const out: unknown[] = [];
    for (;;) {
      const v = this.value();
      if (v === GIVE_UP) return GIVE_UP;
      out.push(v);
      this.skipWs();
      const c = this.b[this.pos++];
      if (c === 0x2c) continue;
      if (c === 0x5d) return out;
      return GIVE_UP;
    }
  }

  /** An object; `shape` names the keys whose values have readers of their own (point writes' vectors), `every` reads all values. */
  object(shape?: Shape, every?: (r: Reader) => unknown): unknown {
    if (++this.depth > this.maxDepth) return GIVE_UP;
    const v = this.objectRest(shape, every);
    this.depth--;
    return v;
  }

  private objectRest(shape: Shape | undefined, every: ((r: Reader) => unknown) | undefined): unknown {
    this.pos++; // {
    const out: Record<string, unknown> = {};
    this.skipWs();
    if (this.b[this.pos] === 0x7d) {
      this.pos++;
      return out;
    }
    for (;;) {
      this.skipWs();
      if (this.b[this.pos] !== 0x22) return GIVE_UP;
      const key = this.string();
      // An own property named __proto__ needs defineProperty; leave it to JSON.parse.
      if (key === GIVE_UP || key === '__proto__') return GIVE_UP;
      this.skipWs();
      if (this.b[this.pos++] !== 0x3a) return GIVE_UP;
      const read = every ?? (shape === undefined ? undefined : shape[key as string]);
      const v = read === undefined ? this.value() : read(this);
      if (v === GIVE_UP) return GIVE_UP;
      out[key as string] = v;
      this.skipWs();
      const c = this.b[this.pos++];
      if (c === 0x2c) continue;
      if (c === 0x7d) return out;
      return GIVE_UP;
    }
  }

  /** An array whose elements are read by `element` when they start with `open` (`[` or `{`), by `value` otherwise. */
  arrayOf(open: number, element: (r: Reader) => unknown): unknown {
    this.skipWs();
    if (this.b[this.pos] !== 0x5b) return this.value();
    if (++this.depth > this.maxDepth) return GIVE_UP;
    const v = this.arrayOfRest(open, element);
    this.depth--;
    return v;
  }

  private arrayOfRest(open: number, element: (r: Reader) => unknown): unknown {
    this.pos++;
    this.skipWs();
    const out: unknown[] = [];
    if (this.b[this.pos] === 0x5d) {
      this.pos++;
      return out;
    }
    for (;;) {
      this.skipWs();
      const v = this.b[this.pos] === open ? element(this) : this.value();
      if (v === GIVE_UP) return GIVE_UP;
      out.push(v);
      this.skipWs();
      const c = this.b[this.pos++];
      if (c === 0x2c) continue;
      if (c === 0x5d) return out;
      return GIVE_UP;
    }
  }

  /** An object whose every value is read by `read` (named vectors). */
  objectOf(read: (r: Reader) => unknown): unknown {
    this.skipWs();
    if (this.b[this.pos] !== 0x7b) return this.value();
    return this.object(undefined, read);
  }

  /**
   * A dense vector: a Float32Array when the text is `[` plain decimals separated by bare
   * commas `]` (see f32Array); otherwise what `value` reads.
   */
  vector(): unknown {
    this.skipWs();
    const b = this.b;
    const at = this.pos;
    if (b[at] === 0x5b && this.depth < this.maxDepth) {
      const c = b[at + 1];
      if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
        const v = this.f32Array(at + 1);
        if (v !== null) return v;
      }
    }
    this.pos = at;
    return this.value();
  }

  /**
   * Reads plain decimals separated by bare commas, from `p` (just after `[`) to the
   * closing `]`, as float32 into the arena, and returns their view (the position moves
   * past `]`); null when the text is in any other form or a value is not one this reads
   * exactly (the caller then reads the array as JSON.parse would).
   *
   * Each value must be Math.fround(the correctly rounded double of the decimal), as
   * JSON.parse followed by a Float32Array store gives:
   *  - up to 15 significant digits (and at most 22 after the point) the double is exact:
   *    the digits as an integer and 10^k are exact doubles and IEEE division rounds
   *    correctly; fround of the quotient is the answer, as long as it is finite;
   *  - 16 to 19 digits (what JSON.stringify writes for a float32 held in a double): the
   *    integer of the digits rounds only in steps that take it past 2^53 (16 digits):
   *    at most 4 steps (of one or eight digits), two roundings each, and the division
   *    once more, so the quotient is within 12 units of its last place of the
   *    decimal's true value, and so of its correctly rounded double. Float32 keeps the
   *    top 24 of the double's 53 bits; unless the 29 bits it drops are within F32_MARGIN
   *    units of the halfway pattern, every double that close rounds to the same
   *    float32, so fround(quotient) is the answer. Near halfway, or outside float32's
   *    normal range, the reader declines.
   */
  private f32Array(p: number): Float32Array | null {
    const b = this.b;
    // A body of L bytes holds at most (L + 1) / 2 numbers.
    let out: Float32Array = this.arena ?? (this.arena = new Float32Array(Math.min(ARENA_FLOATS, (b.length >> 1) + 1)));
    let start = this.used;
    let n = start;
    for (;;) {
      let c = b[p];
      const negative = c === 0x2d;
      if (negative) c = b[++p];
      let m = 0;
      let digits = 0;
      if (c === 0x30) {
        c = b[++p];
      } else if (c >= 0x31 && c <= 0x39) {
        const s = p;
        do {
          m = m * 10 + (c - 0x30);
          c = b[++p];
        } while (c >= 0x30 && c <= 0x39);
        digits = p - s;
      } else return null;
      let fraction = 0;
      if (c === 0x2e) {
        c = b[++p];
        const f0 = p;
        // Zeros right after the point are not significant (when the integer part is 0).
        if (digits === 0) while (c === 0x30) c = b[++p];
        const s0 = p;
        // Eight digits at a time: two little-endian words, each checked to be four ASCII
        // digits (high nibble 3, low nibble at most 9: adding 6 carries into the high
        // nibble otherwise) and turned into its value by pairing neighbours (10a + b,
        // then 100ab + cd); the rest one at a time.
        const words = this.words;
        const last8 = b.length - 8;
        while (p <= last8) {
          const x = words.getUint32(p, true);
          const y = words.getUint32(p + 4, true);
          if ((x & 0xf0f0_f0f0) !== 0x3030_3030 || (y & 0xf0f0_f0f0) !== 0x3030_3030 || ((x + 0x0606_0606) & 0xf0f0_f0f0) !== 0x3030_3030 || ((y + 0x0606_0606) & 0xf0f0_f0f0) !== 0x3030_3030) break;
          let hi4 = x & 0x0f0f_0f0f;
          hi4 = (hi4 * 10 + (hi4 >>> 8)) & 0x00ff_00ff;
          hi4 = (hi4 * 100 + (hi4 >>> 16)) & 0xffff;
          let lo4 = y & 0x0f0f_0f0f;
          lo4 = (lo4 * 10 + (lo4 >>> 8)) & 0x00ff_00ff;
          lo4 = (lo4 * 100 + (lo4 >>> 16)) & 0xffff;
          m = m * 1e8 + (hi4 * 1e4 + lo4);
          p += 8;
        }
        c = b[p];
        while (c >= 0x30 && c <= 0x39) {
          m = m * 10 + (c - 0x30);
          c = b[++p];
        }
        fraction = p - f0;
        if (fraction === 0) return null;
        digits += p - s0;
      }
      // After the number only a bare comma or the closing bracket (exponents, whitespace, a leading zero's digit: declined).
      if ((c !== 0x2c && c !== 0x5d) || digits > 19 || fraction > 22) return null;
      const v = fraction === 0 ? m : m / POW10[fraction];
      if (digits > 15) {
        F64[0] = v;
        const hi = F64_WORDS[1] & 0x7ff0_0000;
        if (hi < F32_NORMAL_MIN_HI || hi >= F32_NORMAL_MAX_HI) return null;
        const half = (F64_WORDS[0] & 0x1fff_ffff) - F32_HALF;
        if (half < F32_MARGIN && half > -F32_MARGIN) return null;
      }
      if (n === out.length) {
        // The arena is full: this vector moves to a new one (the old keeps the views it gave).
        const grown = new Float32Array(Math.max(ARENA_FLOATS, 2 * (n - start + 1)));
        grown.set(out.subarray(start, n));
        n -= start;
        start = 0;
        this.used = 0;
        this.arena = out = grown;
      }
      // At most 19 digits: below 10^19, so always within float32's finite range.
      out[n++] = negative ? -v : v;
      if (c === 0x5d) {
        this.pos = p + 1;
        this.used = n;
        return out.subarray(start, n);
      }
      p++;
    }
  }

  string(): unknown {
    const b = this.b;
    const start = this.pos + 1;
    let ascii = true;
    for (let p = start; p < b.length; p++) {
      const c = b[p];
      if (c === 0x22) {
        this.pos = p + 1;
        return Buffer.prototype.toString.call(b, ascii ? 'latin1' : 'utf8', start, p);
      }
      // Escapes and control characters (which JSON refuses unescaped): JSON.parse decides.
      if (c === 0x5c || c < 0x20) return GIVE_UP;
      if (c >= 0x80) ascii = false;
    }
    return GIVE_UP;
  }

  /** The number at the position; NaN (which JSON cannot write) when the reader gives up. */
  number(): number {
    const b = this.b;
    const start = this.pos;
    let p = start;
    const negative = b[p] === 0x2d;
    if (negative) p++;
    let mantissa = 0;
    let digits = 0;
    let c = b[p];
    if (c === 0x30) {
      p++;
      c = b[p];
      // A leading zero followed by a digit is not JSON.
      if (c >= 0x30 && c <= 0x39) return NaN;
    } else if (c >= 0x31 && c <= 0x39) {
      while (c >= 0x30 && c <= 0x39) {
        mantissa = mantissa * 10 + (c - 0x30);
        digits++;
        c = b[++p];
      }
    } else return NaN;
    let fraction = 0;
    if (c === 0x2e) {
      c = b[++p];
      if (!(c >= 0x30 && c <= 0x39)) return NaN;
      while (c >= 0x30 && c <= 0x39) {
        mantissa = mantissa * 10 + (c - 0x30);
        if (mantissa !== 0) digits++;
        fraction++;
        c = b[++p];
      }
    }
    let exact = digits <= 15 && fraction <= 22;
    if (c === 0x65 || c === 0x45) {
      exact = false;
      c = b[++p];
      if (c === 0x2b || c === 0x2d) c = b[++p];
      if (!(c >= 0x30 && c <= 0x39)) return NaN;
      while (c >= 0x30 && c <= 0x39) c = b[++p];
    }
    this.pos = p;
    if (exact) {
      const v = fraction === 0 ? mantissa : mantissa / POW10[fraction];
      return negative ? -v : v;
    }
    // A body full of such numbers (17-digit doubles, exponents) is read faster by JSON.parse.
    if (++this.slowNumbers > SLOW_NUMBERS) return NaN;
    return Number(Buffer.prototype.toString.call(b, 'latin1', start, p));
  }
}

/** Readers of the values under some keys of an object. */
type Shape = Record<string, ((r: Reader) => unknown) | undefined>;

const readVector = (r: Reader): unknown => r.vector();
/** A point's `vector`: one dense vector, or named ones (sparse ones, `{indices, values}`, are read as they are: `vector` declines objects). */
const readPointVector = (r: Reader): unknown => {
  r.skipWs();
  return r.b[r.pos] === 0x7b ? r.objectOf(readVector) : r.vector();
};
const POINT_KEYS: Shape = Object.assign(Object.create(null), { vector: readPointVector });
/** `batch.vectors`: an array of dense vectors, or names mapped to such arrays. */
const readBatchVectors = (r: Reader): unknown => {
  r.skipWs();
  const rows = (q: Reader) => q.arrayOf(0x5b, readVector);
  return r.b[r.pos] === 0x7b ? r.objectOf(rows) : rows(r);
};
const BATCH_KEYS: Shape = Object.assign(Object.create(null), { vectors: readBatchVectors });
const TOP_KEYS: Shape = Object.assign(Object.create(null), {
  points: (r: Reader) => r.arrayOf(0x7b, (q) => q.object(POINT_KEYS)),
  batch: (r: Reader) => {
    r.skipWs();
    return r.b[r.pos] === 0x7b ? r.object(BATCH_KEYS) : r.value();
  },
});

/** A query's vector: an array, or an object whose `nearest` is one (`{"nearest": [...]}`, with or without `mmr`). */
const readQueryVector = (r: Reader): unknown => {
  r.skipWs();
  return r.b[r.pos] === 0x7b ? r.object(NEAREST_KEYS) : r.vector();
};
const NEAREST_KEYS: Shape = Object.assign(Object.create(null), { nearest: readVector });
/** A legacy search's `vector`: an array, or `{"name": ..., "vector": [...]}`. */
const readSearchVector = (r: Reader): unknown => {
  r.skipWs();
  return r.b[r.pos] === 0x7b ? r.object(NAMED_KEYS) : r.vector();
};
const NAMED_KEYS: Shape = Object.assign(Object.create(null), { vector: readVector });
/** One query or search body: its `query` (the query API) and its `vector` (the legacy search). */
const SEARCH_KEYS: Shape = Object.assign(Object.create(null), { query: readQueryVector, vector: readSearchVector });
/** The body of a query or search, or of their batches (`searches`: a list of such bodies). */
const QUERY_KEYS: Shape = Object.assign(Object.create(null), SEARCH_KEYS, {
  searches: (r: Reader) => r.arrayOf(0x7b, (q) => q.object(SEARCH_KEYS)),
});

/**
 * Where a body's dense vectors are read as Float32Arrays: nowhere, in a point write
 * (`points[].vector`, `batch.vectors`), or in a query (QUERY_KEYS). The request parser
 * (ts/api/request) takes a Float32Array wherever it takes an array of numbers there.
 */
export type VectorPlaces = 'none' | 'point-writes' | 'queries';

/**
 * The value JSON.parse gives for the UTF-8 text `raw`, or undefined when this reader
 * leaves it to JSON.parse. With `places`, the dense vectors there are Float32Arrays
 * instead of arrays of numbers (see the module's comment).
 */
export function readJsonNumbers(raw: Uint8Array, places: VectorPlaces = 'none', maxDepth = Infinity): unknown {
  // A byte order mark, which JSON.parse refuses, is not whitespace here either.
  const r = new Reader(raw, places, maxDepth);
  const v = r.top();
  if (v === GIVE_UP) return undefined;
  r.skipWs();
  return r.pos === raw.length ? v : undefined;
}
