/**
 * The full-text payload index (`field_schema: {type: "text", ...}`): tokenization as
 * the index's parameters say, and an inverted index token -> points.
 *
 * Tokenizers (on each string value of the point):
 *  - `word` (default): runs of letters and digits (Unicode alphabetic or numeric);
 *    everything else separates tokens.
 *  - `whitespace`: runs of non-whitespace.
 *  - `prefix`: as `word`, and the index holds every prefix of each processed word
 *    from `min_token_len` (default 1) to `max_token_len` characters (default: the
 *    word), so a query token matches the words it begins; a query token is the whole
 *    processed word, cut to `max_token_len`. The index holds prefixes up to
 *    PREFIX_INDEXED_MAX characters (or `min_token_len`, if larger) only, whatever
 *    `max_token_len` says (every prefix of a long word,
 *    each its own string, grows with the square of its length: one 200,000-character
 *    word would exhaust memory, and every WAL replay after it too); a longer query
 *    token looks up its first PREFIX_INDEXED_MAX characters and is then checked
 *    against the document's words, so the matches are the same.
 *  - `multilingual`: Unicode word segmentation (UAX #29 through `Intl.Segmenter`,
 *    word-like segments only). The reference segments with dictionaries for Chinese,
 *    Japanese, Korean and Thai (charabia); Intl.Segmenter's ICU dictionaries segment
 *    those scripts too, but word boundaries can differ, and the reference's
 *    script-specific normalisations are not done here.
 * Each token then goes through, in order: lowercase (`lowercase`, default true), ASCII
 * folding (`ascii_folding`: compatibility decomposition, combining marks dropped),
 * stopwords (dropped; the languages' lists of text-languages.ts and a custom list, the
 * words lowercased when `lowercase` is on), the stemmer (`{type: "snowball", language}`:
 * every language of the contract, text-languages.ts; English is Porter2 of
 * snowball-english.ts) and the length bounds in characters, on the stem as the reference
 * counts them (`min_token_len`, `max_token_len`: tokens outside are dropped; for `prefix`
 * they bound the prefixes instead). Every stopword language of the contract has a list
 * (text-languages.ts).
 *
 * Matching (a point's document is the union of the tokens of all its string values):
 *  - `match: {text}`: every token of the query (tokenized the same way) is in the
 *    document. A query with no tokens left matches nothing.
 *  - `match: {text_any}`: at least one query token is in the document.
 *  - `match: {phrase}` with `phrase_matching: true`: the query's tokens appear
 *    consecutively, in order, in one string value's token sequence (stopwords are
 *    removed from both before positions are counted). Without `phrase_matching` the
 *    index does not answer phrases and the condition keeps the no-index meaning
 *    (substring of a value), as for a field without a text index.
 *  - match value / any / except are not answered by a text index (the predicate checks
 *    the payload).
 * The same rules serve the filter predicate (`matcher`, used by filter.ts through the
 * shard) so candidates and checks agree, including inside `nested` conditions.
 *
 * Persistence: in memory (the default) the index is rebuilt from the payloads at load;
 * its schema (with every parameter) is persisted with the collection and in snapshots.
 * With `on_disk: true` (field-index.ts "on_disk", index-disk.ts kind `text`) the base
 * file holds each point's tokens (postings by token, the dictionary of tokens kept in
 * memory) and its text; a point's document is tokenized again from that text when a
 * phrase or a query token longer than the indexed prefixes checks it, or when the
 * point's values are compared on an update. The files record the tokenizer's fingerprint
 * (TOKENIZER_PIPELINE_VERSION): files written under another one are not opened, the
 * index is rebuilt from the payloads instead (their tokens are those of another pipeline).
 *
 * Owns: tokenization and the inverted index. Must never: combine conditions.
 */

import { Match } from './filter';
import { FieldSchema, FieldSchemaError } from './field-schema';
import { FieldIndex } from './field-index';
import { Node } from './index-plan';
import { Off, PathSegment, Posting, postingAdd, postingDelete, postingInto, postingSize } from './sorted-keys';
import type { BaseKind, BaseValue } from './index-disk';
import { hasStemmer, hasStopwords, languagePackages, stemmerFor, stopwordList } from './text-languages';

function stopwordLanguages(sw: unknown): string[] {
  if (typeof sw === 'string') return [sw];
  if (sw !== null && typeof sw === 'object' && Array.isArray((sw as { languages?: unknown }).languages)) {
    return (sw as { languages: string[] }).languages;
  }
  return [];
}

/**
 * Refuses a text schema whose stopword or stemmer language this build does not
 * implement (FieldSchemaError naming it and why; text-languages.ts). Other schemas pass.
 */
export function checkTextSupport(schema: FieldSchema): void {
  if (schema.type !== 'text' || !schema.params) return;
  const p = schema.params;
  for (const lang of stopwordLanguages(p.stopwords)) {
    if (!hasStopwords(lang)) {
      throw new FieldSchemaError(`field_schema.stopwords: stopwords for language "${lang}" are not implemented by Quiver (not a language of the contract)`);
    }
  }
  const st = p.stemmer as { type?: string; language?: string } | null | undefined;
  if (st && st.type === 'snowball' && st.language !== undefined && !hasStemmer(st.language)) {
    throw new FieldSchemaError(`field_schema.stemmer.language: the snowball stemmer for "${st.language}" is not implemented by Quiver`);
  }
}

type TokenizerKind = 'word' | 'whitespace' | 'prefix' | 'multilingual';

const WORD_RE = /[\p{Alphabetic}\p{N}]+/gu;
const SPACE_RE = /\S+/gu;
const MARKS_RE = /\p{M}/gu;
let segmenter: Intl.Segmenter | null = null;

/**
 * The version of the tokenization pipeline: an on-disk text index's files hold the tokens
 * it was written with, and are reopened only when the fingerprint they were written
 * under (TextTokenizer.fingerprint: this, the Unicode and ICU versions, the language
 * packages' versions) is the current one; otherwise the index is rebuilt from the
 * payloads (local-shard.ts, payload-index.ts filesFit).
 * BUMP IT WITH ANY CHANGE TO THE TOKENS A TEXT GIVES: the splitting into words
 * (WORD_RE, SPACE_RE, the segmenter), lowercasing, folding, the order or the rules of the
 * steps in `process` / `bounded` / `indexTokens`, PREFIX_INDEXED_MAX, Quiver's own stopword
 * lists (stopwords-english.ts, stopwords-authored.ts, NLTK_CHANGES of text-languages.ts),
 * its English stemmer (snowball-english.ts), or which package serves a language.
 */
export const TOKENIZER_PIPELINE_VERSION = 1;

/** Longest prefix a `prefix` index without `max_token_len` holds (header comment). */
export const PREFIX_INDEXED_MAX = 32;

/** The tokenizer of one text index's parameters (header comment). */
export class TextTokenizer {
  readonly kind: TokenizerKind;
  private readonly lowercase: boolean;
  private readonly fold: boolean;
  private readonly minLen: number;
  private readonly maxLen: number;
  /** For `prefix`: the longest prefix indexed (max_token_len, at most PREFIX_INDEXED_MAX). */
  readonly prefixCap: number;
  private readonly stop: Set<string> | null;
  private readonly stem: ((w: string) => string) | null;
  private readonly stopLangs: readonly string[];
  private readonly stemLang: string | null;
  private fp: string | null = null;

  constructor(params: Readonly<Record<string, unknown>> | undefined) {
    const p = params ?? {};
    this.kind = (typeof p.tokenizer === 'string' ? p.tokenizer : 'word') as TokenizerKind;
    this.lowercase = p.lowercase !== false;
    this.fold = p.ascii_folding === true;
    this.minLen = typeof p.min_token_len === 'number' ? p.min_token_len : 0;
    this.maxLen = typeof p.max_token_len === 'number' ? p.max_token_len : Infinity;
    // At least min_token_len: the shortest prefix a word is indexed under.
    this.prefixCap = Math.min(this.maxLen, Math.max(PREFIX_INDEXED_MAX, this.minLen));
    const stop = new Set<string>();
    this.stopLangs = stopwordLanguages(p.stopwords);
    for (const lang of this.stopLangs) {
      const list = stopwordList(lang);
      // a language this build lacks is refused at creation (checkTextSupport); an index
      // that reaches here with one anyway (a state written elsewhere) must not quietly drop it
      if (list === null) throw new FieldSchemaError(`field_schema.stopwords: stopwords for language "${lang}" are not implemented by Quiver`);
      for (const w of list) stop.add(this.lowercase ? w.toLowerCase() : w);
    }
    const custom = p.stopwords && typeof p.stopwords === 'object' ? (p.stopwords as { custom?: unknown }).custom : undefined;
    if (Array.isArray(custom)) for (const w of custom) if (typeof w === 'string') stop.add(this.lowercase ? w.toLowerCase() : w);
    this.stop = stop.size > 0 ? stop : null;
    const st = p.stemmer as { type?: string; language?: string } | null | undefined;
    this.stem = null;
    this.stemLang = null;
    if (st && st.type === 'snowball' && st.language) {
      this.stemLang = st.language;
      this.stem = stemmerFor(st.language);
      if (this.stem === null) throw new FieldSchemaError(`field_schema.stemmer.language: the snowball stemmer for "${st.language}" is not implemented by Quiver`);
    }
  }

  /**
   * What decides the tokens besides the index's parameters (TOKENIZER_PIPELINE_VERSION):
   * the pipeline version, the Unicode version (word splitting, lowercasing, folding),
   * for `multilingual` the ICU version (word segmentation), and the versions of the
   * packages the stopword lists and the stemmer come from.
   */
  get fingerprint(): string {
    if (this.fp === null) {
      const parts = [`pipeline ${TOKENIZER_PIPELINE_VERSION}`, `unicode ${process.versions.unicode ?? '?'}`];
      if (this.kind === 'multilingual') parts.push(`icu ${process.versions.icu ?? '?'}`);
      parts.push(...languagePackages(this.stopLangs, this.stemLang));
      this.fp = parts.join('; ');
    }
    return this.fp;
  }

  private words(text: string): string[] {
    switch (this.kind) {
      case 'whitespace':
        return text.match(SPACE_RE) ?? [];
      case 'multilingual': {
        segmenter ??= new Intl.Segmenter(undefined, { granularity: 'word' });
        const out: string[] = [];
        for (const s of segmenter.segment(text)) if (s.isWordLike) out.push(s.segment);
        return out;
      }
      default:
        return text.match(WORD_RE) ?? [];
    }
  }

  /** Lowercase, fold, stopwords, stem, length of the stem (unless `prefix`: bounded()); null when dropped. */
  private process(raw: string): string | null {
    let t = this.lowercase ? raw.toLowerCase() : raw;
    if (this.fold) t = t.normalize('NFKD').replace(MARKS_RE, '');
    if (t.length === 0) return null;
    if (this.stop !== null && this.stop.has(t)) return null;
    if (this.stem !== null) t = this.stem(t);
    if (this.kind !== 'prefix') {
      const n = charLen(t);
      if (n < this.minLen || n > this.maxLen) return null;
    }
    return t;
  }

  /** For `prefix`: a processed word cut to max_token_len, null when shorter than min. */
  private bounded(t: string): string | null {
    const chars = [...t];
    if (chars.length < Math.max(1, this.minLen)) return null;
    return chars.length > this.maxLen ? chars.slice(0, this.maxLen).join('') : t;
  }

  /** The token sequence of one text (what queries and phrases compare). */
  sequence(text: string): string[] {
    const out: string[] = [];
    for (const w of this.words(text)) {
      let t = this.process(w);
      if (t !== null && this.kind === 'prefix') t = this.bounded(t);
      if (t !== null) out.push(t);
    }
    return out;
  }

  /** Tokens a document is indexed under: its sequence, and for `prefix` every prefix. */
  indexTokens(seq: readonly string[], into: Set<string>): void {
    if (this.kind !== 'prefix') {
      for (const t of seq) into.add(t);
      return;
    }
    const lo = Math.max(1, this.minLen);
    for (const t of seq) {
      const chars = [...t];
      const hi = Math.min(chars.length, this.prefixCap);
      for (let n = lo; n <= hi; n++) into.add(chars.slice(0, n).join(''));
    }
  }

  /** For `prefix`: whether query token `t` is longer than the indexed prefixes (then checked against the words). */
  beyondIndexed(t: string): boolean {
    return this.kind === 'prefix' && t.length > this.prefixCap && charLen(t) > this.prefixCap;
  }

  /** The indexed token a query token is looked up by (its indexed prefix when longer). */
  lookupKey(t: string): string {
    return this.beyondIndexed(t) ? [...t].slice(0, this.prefixCap).join('') : t;
  }
}

function charLen(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdbff) n++;
  }
  return n;
}

/** One point's document: its indexed tokens and, with phrase matching, each value's sequence. */
export interface TextDoc {
  /** The point's string when it has one, else the JSON array of its strings (`many`). */
  readonly src: string;
  readonly many: boolean;
  readonly tokens: Set<string>;
  readonly seqs: string[][] | null;
  /** For `prefix`: the token sequences, which a query token longer than the indexed prefixes is checked against. */
  readonly words?: string[][];
}

function containsRun(seq: readonly string[], q: readonly string[]): boolean {
  outer: for (let i = 0; i + q.length <= seq.length; i++) {
    for (let j = 0; j < q.length; j++) if (seq[i + j] !== q[j]) continue outer;
    return true;
  }
  return false;
}

export class TextIndex extends FieldIndex<TextDoc> {
  readonly postings = new Map<string, Posting>();
  readonly tokenizer: TextTokenizer;
  readonly phrase: boolean;

  constructor(field: string, path: PathSegment[], schema: FieldSchema) {
    super(field, path, schema);
    this.tokenizer = new TextTokenizer(schema.params);
    this.phrase = schema.params?.phrase_matching === true;
  }

  /** The document of a point's flat values, or null when it has no string. */
  doc(flat: readonly unknown[]): TextDoc | null {
    const strings = flat.filter((v): v is string => typeof v === 'string');
    if (strings.length === 0) return null;
    const tokens = new Set<string>();
    const seqs: string[][] | null = this.phrase ? [] : null;
    const words: string[][] | undefined = this.tokenizer.kind === 'prefix' ? [] : undefined;
    for (const s of strings) {
      const seq = this.tokenizer.sequence(s);
      this.tokenizer.indexTokens(seq, tokens);
      if (seqs !== null) seqs.push(seq);
      words?.push(seq);
    }
    const many = strings.length > 1;
    return { src: many ? JSON.stringify(strings) : strings[0], many, tokens, seqs, ...(words ? { words } : {}) };
  }

  /** Whether document `d` holds query token `t` (a token beyond the indexed prefixes: a word it begins). */
  private has(d: TextDoc, t: string): boolean {
    if (!this.tokenizer.beyondIndexed(t)) return d.tokens.has(t);
    return d.words !== undefined && d.words.some((seq) => seq.some((w) => w.startsWith(t)));
  }

  protected extract(flat: unknown[]): TextDoc[] {
    const d = this.doc(flat);
    return d === null ? [] : [d];
  }
  protected isCounted(vals: TextDoc[]): boolean {
    return vals.length > 0;
  }
  protected sameValue(a: TextDoc, b: TextDoc): boolean {
    // `src` of several strings is their JSON array, which one string can equal
    return a.many === b.many && a.src === b.src;
  }
  protected addEntries(off: Off, vals: TextDoc[]): void {
    for (const d of vals) for (const t of d.tokens) postingAdd(this.postings, t, off);
  }
  protected removeEntries(off: Off, vals: TextDoc[]): void {
    for (const d of vals) for (const t of d.tokens) postingDelete(this.postings, t, off);
  }

  // on_disk (field-index.ts): the base holds each point's tokens (postings by token) and its
  // text, "s" + the string or "m" + the JSON array of its strings; a document read back is
  // tokenized again from the text.
  baseKind(): BaseKind {
    return 'text';
  }
  tokenFingerprint(): string {
    return this.tokenizer.fingerprint;
  }
  protected toStored(vals: TextDoc[]): { vals: BaseValue[]; aux?: string } {
    const d = vals[0];
    return d === undefined ? { vals: [] } : { vals: [...d.tokens], aux: (d.many ? 'm' : 's') + d.src };
  }
  protected fromStored(_vals: BaseValue[], aux: string | undefined): TextDoc[] {
    if (aux === undefined) return [];
    const d = this.doc(aux[0] === 'm' ? (JSON.parse(aux.slice(1)) as string[]) : [aux.slice(1)]);
    return d === null ? [] : [d];
  }
  protected clearChanges(): void {
    this.postings.clear();
  }

  /** Points with token `t` (the changes', and the base's not masked). */
  private tokenCount(t: string): number {
    return postingSize(this.postings.get(t)) + (this.base === null ? 0 : this.base.postingCount(t));
  }
  private tokenInto(t: string, out: Set<Off>): void {
    postingInto(this.postings.get(t), out);
    this.base?.postingInto(t, this.masked, out);
  }
  private tokenHas(t: string, o: Off): boolean {
    const p = this.postings.get(t);
    if (p !== undefined && (typeof p === 'number' ? p === o : p.has(o))) return true;
    return this.base !== null && !this.masked.has(o) && this.base.postingHas(t, o);
  }

  /**
   * The test of a text / text_any / phrase condition on one document, with the query
   * tokens; null when this index does not answer the condition (header comment).
   */
  private query(m: Match): { kind: 'all' | 'any' | 'phrase'; q: string[]; test: (d: TextDoc) => boolean } | null {
    if ('text' in m) {
      const q = [...new Set(this.tokenizer.sequence(m.text))];
      return { kind: 'all', q, test: (d) => q.length > 0 && q.every((t) => this.has(d, t)) };
    }
    if ('text_any' in m) {
      const q = [...new Set(this.tokenizer.sequence(m.text_any))];
      return { kind: 'any', q, test: (d) => q.some((t) => this.has(d, t)) };
    }
    if ('phrase' in m && this.phrase) {
      const q = this.tokenizer.sequence(m.phrase);
      return { kind: 'phrase', q, test: (d) => q.length > 0 && d.seqs!.some((s) => containsRun(s, q)) };
    }
    return null;
  }

  /** The predicate on a point's flat values for the condition, or null when not answered here. */
  matcher(m: Match): ((flat: readonly unknown[]) => boolean) | null {
    const qr = this.query(m);
    if (qr === null) return null;
    return (flat) => {
      const d = this.doc(flat);
      return d !== null && qr.test(d);
    };
  }

  matchNode(m: Match, wide: boolean): Node | null {
    const qr = this.query(m);
    if (qr === null) return null;
    const { kind, q, test } = qr;
    const key = (t: string) => this.tokenizer.lookupKey(t);
    // A token beyond the indexed prefixes finds candidates by its indexed prefix: each is checked.
    const check = kind === 'phrase' || q.some((t) => this.tokenizer.beyondIndexed(t));
    const docOf = (o: Off) => this.valuesOf(o)![0];
    if (kind === 'any') {
      let est = 0;
      for (const t of q) est += this.tokenCount(key(t));
      return this.leaf(wide, test, est, (out) => {
        if (!check) {
          for (const t of q) this.tokenInto(t, out);
          return;
        }
        const cands = new Set<Off>();
        for (const t of q) this.tokenInto(key(t), cands);
        for (const o of cands) if (test(docOf(o))) out.add(o);
      });
    }
    // all tokens (text, and the candidates of a phrase): walk the rarest posting
    const lists = [...new Set(q.map(key))].map((t) => ({ t, n: this.tokenCount(t) }));
    const missing = q.length === 0 || lists.some((l) => l.n === 0);
    lists.sort((a, b) => a.n - b.n);
    const est = missing ? 0 : lists[0].n;
    return this.leaf(wide, test, est, (out) => {
      if (missing) return;
      // in memory the rarest posting is walked as it is; on disk it is read first
      let first: Posting | undefined = this.postings.get(lists[0].t);
      if (this.base !== null) {
        const all = new Set<Off>();
        this.tokenInto(lists[0].t, all);
        first = all;
      }
      const rest = lists.slice(1).map((l) => l.t);
      const each = (o: Off) => {
        if (!rest.every((t) => this.tokenHas(t, o))) return;
        if (check && !test(docOf(o))) return;
        out.add(o);
      };
      if (typeof first === 'number') each(first);
      else if (first !== undefined) for (const o of first) each(o);
    });
  }
}
