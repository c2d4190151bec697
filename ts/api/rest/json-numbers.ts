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
 * JSON.parse's is. Other numbers go through Number(), which rounds correctly too.
 * Strings with escapes or control characters, and anything unusual, make it give up.
 */

const POW10: number[] = Array.from({ length: 23 }, (_, i) => 10 ** i);

/** No value: the reader gave up and JSON.parse should decide. */
const GIVE_UP = Symbol('give up');

class Reader {
  pos = 0;
  constructor(readonly b: Uint8Array) {}

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

  object(): unknown {
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
      const v = this.value();
      if (v === GIVE_UP) return GIVE_UP;
      out[key as string] = v;
      this.skipWs();
      const c = this.b[this.pos++];
      if (c === 0x2c) continue;
      if (c === 0x7d) return out;
      return GIVE_UP;
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
    return Number(Buffer.prototype.toString.call(b, 'latin1', start, p));
  }
}

/** The value JSON.parse gives for the UTF-8 text `raw`, or undefined when this reader leaves it to JSON.parse. */
export function readJsonNumbers(raw: Uint8Array): unknown {
  // A byte order mark, which JSON.parse refuses, is not whitespace here either.
  const r = new Reader(raw);
  const v = r.value();
  if (v === GIVE_UP) return undefined;
  r.skipWs();
  return r.pos === raw.length ? v : undefined;
}
