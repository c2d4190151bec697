/**
 * The full-text index (ts/shard/text-index.ts) through PayloadIndexes and the filter
 * predicate the shard compiles (compileFilter with the indexes' text hook):
 *  - a table of texts, index parameters and queries with the matches the reference's
 *    documentation gives, each case citing its page;
 *  - the English Snowball stemmer on words from the algorithm's published sample;
 *  - every stopword and stemmer language of the contract: stems of Snowball's published
 *    sample words, a stopword of each list, combinations with custom words, lowercase,
 *    the multilingual tokenizer and phrases; the three lists written for Quiver
 *    (azerbaijani, hinglish, tajik): their words are tokens, and they drop function words;
 *  - a seeded randomized check against a naive scan written here (its own tokenizer),
 *    across updates. Replay with TEXT_INDEX_SEED=<seed>.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import test from 'ava';

import { Filter, PointId, compileFilter, validateFilter } from '../../ts/shard/filter';
import { PayloadIndexes } from '../../ts/shard/payload-index';
import { FieldSchemaError, parseFieldSchema } from '../../ts/shard/field-schema';
import { TextTokenizer, checkTextSupport } from '../../ts/shard/text-index';
import { AZERBAIJANI_STOPWORDS, HINGLISH_ROMANIZED_STOPWORDS, TAJIK_STOPWORDS } from '../../ts/shard/stopwords-authored';
import { stemmerFor, stopwordList } from '../../ts/shard/text-languages';
import { specPath } from '../support/openapi';
import { stemEnglish } from '../../ts/shard/snowball-english';
import { mulberry32 } from '../support/rng';

type P = Record<string, unknown> | null;

/** The reference's v1.18 document (its `Language` and `SnowballLanguage` enums). */
function loadOpenApi(): { components: { schemas: Record<string, { enum?: unknown[] }> } } {
  return JSON.parse(fs.readFileSync(specPath(path.resolve(__dirname, '..', '..', '..')), 'utf8'));
}

const DOC_FILTERING = 'https://qdrant.tech/documentation/concepts/filtering/#full-text-match';
const DOC_PHRASE = 'https://qdrant.tech/documentation/concepts/filtering/#phrase-match';
const DOC_INDEXING = 'https://qdrant.tech/documentation/concepts/indexing/#full-text-index';
const DOC_TEXT_FILTERING = 'https://qdrant.tech/documentation/search/text-search/text-filtering/';
const DOC_BLOG = 'https://qdrant.tech/articles/qdrant-introduces-full-text-filters-and-indexes/';
const SNOWBALL = 'https://snowballstem.org/algorithms/english/stemmer.html';

/** The offsets matching `filter`: the index's candidates checked by the shard's predicate, and a full scan; both must agree. */
function run(points: P[], schema: unknown, cond: Record<string, unknown>, key = 's'): { viaIndex: number[] | null; scan: number[] } {
  const pi = new PayloadIndexes();
  if (schema !== null) pi.create(key, parseFieldSchema(schema), points.map((p, i) => [BigInt(i), p] as [bigint, P]));
  const f = validateFilter({ must: [{ key, ...cond }] }) as Filter;
  const pred = compileFilter(f, (n, m) => pi.textMatcher(n, m));
  const scan = points.map((p, i) => (pred(i as PointId, p) ? i : -1)).filter((i) => i >= 0);
  const c = pi.candidates(f);
  const viaIndex = c === null ? null : [...c].map(Number).filter((o) => pred(o, points[o])).sort((a, b) => a - b);
  return { viaIndex, scan };
}

interface Case {
  cite: string;
  what: string;
  schema: unknown;
  texts: unknown[];
  match: Record<string, unknown>;
  expect: number[];
  /** The index narrows the candidates (false: the predicate decides alone). */
  indexed?: boolean;
}

const CASES: Case[] = [
  {
    cite: DOC_FILTERING,
    what: 'several words: all of them must be present (any order)',
    schema: { type: 'text' },
    texts: ['good cheap car', 'cheap good', 'good car', 'a good and cheap thing'],
    match: { text: 'good cheap' },
    expect: [0, 1, 3],
  },
  {
    cite: DOC_FILTERING,
    what: 'without a text index: exact substring of the whole query',
    schema: null,
    texts: ['good cheap car', 'cheap good', 'goodcheap', 'Good cheap'],
    match: { text: 'good cheap' },
    expect: [0],
    indexed: false,
  },
  {
    cite: DOC_TEXT_FILTERING,
    what: '"united" matches "United States" and "United Kingdom" (case-insensitive by default)',
    schema: { type: 'text', tokenizer: 'word' },
    texts: ['United States', 'United Kingdom', 'Reunited', 'UNITED'],
    match: { text: 'united' },
    expect: [0, 1, 3],
  },
  {
    cite: DOC_INDEXING,
    what: 'word tokenizer: spaces, punctuation and special characters split tokens',
    schema: { type: 'text', tokenizer: 'word' },
    texts: ['long_sleeves, cotton', 'long-sleeves', 'longsleeves', 'sleeves:long'],
    match: { text: 'long sleeves' },
    expect: [0, 1, 3],
  },
  {
    cite: DOC_INDEXING,
    what: 'whitespace tokenizer: only whitespace splits tokens',
    schema: { type: 'text', tokenizer: 'whitespace' },
    texts: ['long_sleeves cotton', 'long sleeves', 'long-sleeves'],
    match: { text: 'long_sleeves' },
    expect: [0],
  },
  {
    cite: DOC_BLOG,
    what: 'prefix tokenizer: "Qdrant" is indexed as Q, Qd, Qdr, ... so a query prefix matches',
    schema: { type: 'text', tokenizer: 'prefix' },
    texts: ['Qdrant vector database', 'quiver', 'the qdr project', 'drant'],
    match: { text: 'qdr' },
    expect: [0, 2],
  },
  {
    cite: DOC_INDEXING,
    what: 'prefix tokenizer with min_token_len: prefixes shorter than the minimum are not indexed',
    schema: { type: 'text', tokenizer: 'prefix', min_token_len: 3 },
    texts: ['Qdrant', 'qd'],
    match: { text: 'qd' },
    expect: [],
  },
  {
    cite: DOC_INDEXING,
    what: 'min_token_len / max_token_len: shorter or longer tokens are not indexed',
    schema: { type: 'text', min_token_len: 2, max_token_len: 5 },
    texts: ['a big elephant', 'big a', 'elephant'],
    match: { text_any: 'a big elephant' },
    expect: [0, 1],
  },
  {
    cite: DOC_BLOG,
    what: 'lowercase: false makes the index case-sensitive',
    schema: { type: 'text', lowercase: false },
    texts: ['Qdrant', 'qdrant'],
    match: { text: 'Qdrant' },
    expect: [0],
  },
  {
    cite: DOC_INDEXING,
    what: 'stopwords english: "the" is dropped from documents and queries',
    schema: { type: 'text', stopwords: 'english' },
    texts: ['the quick fox', 'quick fox', 'the end'],
    match: { text: 'the quick fox' },
    expect: [0, 1],
  },
  {
    cite: DOC_INDEXING,
    what: 'custom stopwords merge with languages',
    schema: { type: 'text', stopwords: { languages: ['english'], custom: ['Quiver'] } },
    texts: ['quiver of arrows', 'arrows'],
    match: { text: 'the quiver arrows' },
    expect: [0, 1],
  },
  {
    cite: DOC_INDEXING,
    what: 'stemmer snowball english: running / runs / run share the stem',
    schema: { type: 'text', stemmer: { type: 'snowball', language: 'english' } },
    texts: ['she was running', 'he runs', 'a run', 'runner'],
    match: { text: 'run' },
    expect: [0, 1, 2],
  },
  {
    cite: DOC_FILTERING,
    what: 'text_any: at least one query word',
    schema: { type: 'text' },
    texts: ['apple pie', 'banana split', 'cherry'],
    match: { text_any: 'apple cherry durian' },
    expect: [0, 2],
  },
  {
    cite: DOC_PHRASE,
    what: 'phrase with phrase_matching: the words in that order, next to each other',
    schema: { type: 'text', phrase_matching: true },
    texts: ['the quick brown fox', 'brown quick fox', 'quick, brown!', 'quick red brown'],
    match: { phrase: 'quick brown' },
    expect: [0, 2],
  },
  {
    cite: DOC_PHRASE,
    what: 'phrase with stopwords: positions count the remaining words',
    schema: { type: 'text', phrase_matching: true, stopwords: 'english' },
    texts: ['cat in the hat', 'cat hat', 'hat cat'],
    match: { phrase: 'cat the hat' },
    expect: [0, 1],
  },
  {
    cite: DOC_FILTERING,
    what: 'a point with several strings: all words across its values',
    schema: { type: 'text' },
    texts: [['good', 'cheap'], ['good'], 'cheap good'],
    match: { text: 'cheap good' },
    expect: [0, 2],
  },
  {
    cite: DOC_INDEXING,
    what: 'multilingual tokenizer: Unicode word boundaries, lowercased',
    schema: { type: 'text', tokenizer: 'multilingual' },
    texts: ['Größe und Weiß', 'grösse', 'weiß.'],
    match: { text: 'weiß' },
    expect: [0, 2],
  },
  {
    cite: DOC_INDEXING,
    what: 'ascii_folding: accented letters fold to ASCII',
    schema: { type: 'text', ascii_folding: true },
    texts: ['ação rápida', 'acao', 'acção'],
    match: { text: 'acao' },
    expect: [0, 1],
  },
];

for (const c of CASES) {
  test(`table: ${c.what} (${c.cite})`, (t) => {
    const points = c.texts.map((s) => ({ s }));
    const { viaIndex, scan } = run(points, c.schema, { match: c.match });
    t.deepEqual(scan, c.expect, 'predicate over every point');
    if (c.indexed === false) t.is(viaIndex, null);
    else t.deepEqual(viaIndex, c.expect, 'index candidates checked by the predicate');
  });
}

test('a query with no tokens left matches nothing; unknown words match nothing', (t) => {
  const points = [{ s: 'the cat' }, { s: 'dog' }];
  t.deepEqual(run(points, { type: 'text', stopwords: 'english' }, { match: { text: 'the' } }).scan, []);
  t.deepEqual(run(points, { type: 'text' }, { match: { text: '!!' } }).viaIndex, []);
  t.deepEqual(run(points, { type: 'text' }, { match: { text: 'cat zebra' } }).viaIndex, []);
  t.deepEqual(run(points, { type: 'text' }, { match: { text_any: 'cat zebra' } }).viaIndex, [0]);
});

test('phrase without phrase_matching keeps the no-index substring meaning', (t) => {
  const points = [{ s: 'quick brown' }, { s: 'Quick Brown' }, { s: 'brown quick' }];
  const r = run(points, { type: 'text' }, { match: { phrase: 'quick brown' } });
  t.deepEqual(r.scan, [0]);
  t.is(r.viaIndex, null);
});

test('nested: a text index on arr[].t serves a nested condition, per element', (t) => {
  const pi = new PayloadIndexes();
  const points: P[] = [{ arr: [{ t: 'red apple' }, { t: 'green pear' }] }, { arr: [{ t: 'red pear' }] }];
  pi.create('arr[].t', parseFieldSchema({ type: 'text' }), points.map((p, i) => [BigInt(i), p] as [bigint, P]));
  const f = validateFilter({ must: [{ nested: { key: 'arr', filter: { must: [{ key: 't', match: { text: 'pear red' } }] } } }] }) as Filter;
  const pred = compileFilter(f, (n, m) => pi.textMatcher(n, m));
  t.deepEqual([...pi.candidates(f)!].map(Number).sort(), [0, 1], 'point-level candidates');
  t.deepEqual([0, 1].filter((i) => pred(i, points[i])), [1], 'the words must be in one element');
});

test('a keyword index beside a text index on the same names does not narrow text conditions by substrings', (t) => {
  const points: P[] = [{ a: { b: 'Red apple' } }, { a: [{ b: 'red' }] }, { a: { b: 'bored' } }];
  const pi = new PayloadIndexes();
  pi.create('a.b', parseFieldSchema('keyword'), points.map((p, i) => [BigInt(i), p] as [bigint, P]));
  pi.create('a[].b', parseFieldSchema({ type: 'text' }), points.map((p, i) => [BigInt(i), p] as [bigint, P]));
  const f = validateFilter({ must: [{ key: 'a.b', match: { text: 'RED' } }] }) as Filter;
  const pred = compileFilter(f, (n, m) => pi.textMatcher(n, m));
  const got = [...pi.candidates(f)!].map(Number).filter((o) => pred(o, points[o])).sort();
  t.deepEqual(got, [0, 1]);
});

test('updates: re-indexing a point replaces its tokens', (t) => {
  const pi = new PayloadIndexes();
  pi.create('s', parseFieldSchema({ type: 'text' }), [[0n, { s: 'alpha beta' }]]);
  const f = validateFilter({ must: [{ key: 's', match: { text: 'alpha' } }] }) as Filter;
  t.deepEqual([...pi.candidates(f)!].map(Number), [0]);
  pi.update(0n, { s: 'gamma' });
  t.deepEqual([...pi.candidates(f)!], []);
  pi.update(1n, { s: 'Alpha' });
  t.deepEqual([...pi.candidates(f)!].map(Number), [1]);
  t.is(pi.schemaInfo().s.points, 2);
  pi.update(1n, null);
  t.is(pi.schemaInfo().s.points, 1);
});

test('updates: several strings replaced by one string whose text is their JSON array are a change (in memory and on disk)', async (t) => {
  const points = new Map<number, P>([[0, { txt: ['alpha', 'beta'] }]]);
  const entries = () => [...points].map(([o, p]) => [BigInt(o), p] as [bigint, P]);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-text-'));
  const mem = new PayloadIndexes();
  const disk = new PayloadIndexes();
  for (const pi of [mem, disk]) pi.universe = { size: () => points.size, offsets: () => [...points.keys()].map((o) => BigInt(o)) };
  mem.create('txt', parseFieldSchema({ type: 'text', phrase_matching: true }), entries());
  disk.create('txt', parseFieldSchema({ type: 'text', phrase_matching: true, on_disk: true }), entries());
  let n = 0;
  await disk.moveToDisk('txt', dir, () => ++n);
  points.set(0, { txt: '["alpha","beta"]' });
  for (const pi of [mem, disk]) pi.update(0n, points.get(0)!);
  // "alpha beta" is a phrase of the one string now (two strings held no such run)
  const f = validateFilter({ must: [{ key: 'txt', match: { phrase: 'alpha beta' } }] }) as Filter;
  for (const [what, pi] of [['memory', mem], ['disk', disk]] as const) {
    const pred = compileFilter(f, (names, m) => pi.textMatcher(names, m));
    t.true(pred(0 as PointId, points.get(0)!), `${what}: the predicate matches`);
    t.deepEqual([...pi.candidates(f)!].map(Number), [0], `${what}: the index has the new document`);
  }
  disk.closeFiles();
  fs.rmSync(dir, { recursive: true, force: true });
});

test(`stemmer: English Porter2 on words from the published sample (${SNOWBALL})`, (t) => {
  const sample: Record<string, string> = {
    consign: 'consign', consigned: 'consign', consigning: 'consign', consignment: 'consign', consist: 'consist',
    consisted: 'consist', consistency: 'consist', consistent: 'consist', consistently: 'consist', consolation: 'consol',
    consolations: 'consol', consolatory: 'consolatori', console: 'consol', consolidate: 'consolid', consolingly: 'consol',
    consonant: 'conson', conspicuous: 'conspicu', conspiracy: 'conspiraci', conspirator: 'conspir', constable: 'constabl',
    constancy: 'constanc', knackeries: 'knackeri', knaves: 'knave', knavish: 'knavish', kneaded: 'knead',
    kneeling: 'kneel', knees: 'knee', knightly: 'knight', knitting: 'knit', knives: 'knive', knocker: 'knocker',
    generously: 'generous', skies: 'sky', dying: 'die', news: 'news', gently: 'gentl', cries: 'cri', ties: 'tie',
    caresses: 'caress', ponies: 'poni', hopping: 'hop', hoping: 'hope', agreed: 'agre', happiness: 'happi',
    communication: 'communic', sensational: 'sensat', beautifully: 'beauti', by: 'by', say: 'say', cry: 'cri',
  };
  for (const [w, s] of Object.entries(sample)) t.is(stemEnglish(w), s, w);
});

test('every language of the contract is accepted, with a stopword list or a stemmer of its own', (t) => {
  const doc = loadOpenApi();
  const languages = doc.components.schemas.Language.enum as string[];
  const snowball = doc.components.schemas.SnowballLanguage.enum as string[];
  t.is(languages.length, 30);
  t.is(snowball.length, 19);
  for (const lang of languages) {
    const schema = parseFieldSchema({ type: 'text', stopwords: lang });
    t.notThrows(() => checkTextSupport(schema), lang);
    t.notThrows(() => new PayloadIndexes().create('s', schema, []), lang);
    t.true(stopwordList(lang)!.size > 0, lang);
  }
  for (const lang of snowball) {
    t.notThrows(() => checkTextSupport(parseFieldSchema({ type: 'text', stemmer: { type: 'snowball', language: lang } })), lang);
    t.is(typeof stemmerFor(lang)!('x'), 'string', lang);
  }
  t.notThrows(() => checkTextSupport(parseFieldSchema({ type: 'text', stopwords: { languages: ['german', 'az', 'hi-en', 'tg'] } })));
  t.notThrows(() => checkTextSupport(parseFieldSchema({ type: 'text', stopwords: { languages: ['en', 'de'], custom: ['zz'] }, stemmer: { type: 'snowball', language: 'fr' } })));
  t.notThrows(() => checkTextSupport(parseFieldSchema({ type: 'text', stopwords: { custom: ['və', 'bu'] } })), 'a custom list works for any language');
  t.throws(() => parseFieldSchema({ type: 'text', stopwords: 'klingon' }), { instanceOf: FieldSchemaError }, 'a language outside the contract is refused');
});

/**
 * Snowball stemmers: two forms of a word from the algorithm's published sample vocabulary
 * (snowball-data: <language>/voc.txt) and the stem its published output (output.txt)
 * gives both, where the reference's stemmer crate (qdrant-rust-stemmers 1.2.2) gives the
 * same. Arabic: the crate's own sample (test_data/voc_ar.txt, res_ar.txt, taken from
 * snowball-data's Arabic list). Tamil (snowball-data's Tamil files are not in its git
 * tree): common words, with the stems the reference's crate gives.
 */
const SNOWBALL_DATA = 'https://github.com/snowballstem/snowball-data';
const STEMS: Record<string, Array<[string[], string]>> = {
  arabic: [[['بمسافتنا', 'فمسافتاه'], 'مساف'], [['فبترجيحييكن', 'وبترجيحييكن'], 'ترجيحي'], [['فلمتربيه', 'ولمتربين'], 'لمترب']],
  armenian: [[['դասատու', 'դասատուներ'], 'դասատ'], [['կոչվելու', 'կոչվեց'], 'կոչվ'], [['ոճական', 'ոճավորում'], 'ոճ']],
  danish: [[['forfærde', 'forfærdelig'], 'forfærd'], [['lastdragere', 'lastdragerne'], 'lastdrag'], [['skønhed', 'skønhedens'], 'skøn']],
  dutch: [[['dineren', 'diners'], 'diner'], [['mondeling', 'mondelinge'], 'mondel'], [['strompelen', 'strompelend'], 'strompel']],
  english: [[['curled', 'curling'], 'curl'], [['infectious', 'infectiously'], 'infecti'], [['remanded', 'remands'], 'remand']],
  finnish: [[['asiakirja', 'asiakirjaa'], 'asiakirj'], [['entsyymejä', 'entsyymi'], 'entsyym'], [['henkilökortilla', 'henkilökortti'], 'henkilökort']],
  french: [[['contrariété', 'contrariétés'], 'contrariet'], [['impression', 'impressions'], 'impress'], [['prétendaient', 'prétendait'], 'prétend']],
  german: [[['eindringe', 'eindringen'], 'eindring'], [['jetzigen', 'jetziges'], 'jetzig'], [['steuer', 'steuern'], 'steu']],
  greek: [[['βυθισμένα', 'βυθισμένες'], 'βυθισμεν'], [['καλεσμένη', 'καλεσμένο'], 'καλεσμεν'], [['ποιοτικά', 'ποιοτικού'], 'ποιοτ']],
  hungarian: [[['bárban', 'bárjaiban'], 'bár'], [['konzorciuma', 'konzorciumok'], 'konzorcium'], [['lövések', 'lövéseket'], 'lövés']],
  italian: [[['congrui', 'congruo'], 'congru'], [['insolente', 'insolenza'], 'insolent'], [['richiusa', 'richiuse'], 'richius']],
  norwegian: [[['forenkla', 'forenklende'], 'forenkl'], [['landbrukssamvirket', 'landbrukssamvirkets'], 'landbrukssamvirk'], [['sittende', 'sitter'], 'sitt']],
  portuguese: [[['cometa', 'cometas'], 'comet'], [['fervilhante', 'fervilhantes'], 'fervilh'], [['perfumado', 'perfumaria'], 'perfum']],
  romanian: [[['coșmaruri', 'coșmarurile'], 'coșmarur'], [['instanța', 'instanțe'], 'instanț'], [['proverbe', 'proverbiabili'], 'proverb']],
  russian: [[['задатка', 'задатки'], 'задатк'], [['объявляет', 'объявляется'], 'объявля'], [['разбей', 'разбившимся'], 'разб']],
  spanish: [[['concentra', 'concentraciones'], 'concentr'], [['gancho', 'ganchos'], 'ganch'], [['podremos', 'podría'], 'podr']],
  swedish: [[['frukta', 'fruktad'], 'frukt'], [['lemningar', 'lemningarne'], 'lemning'], [['slösade', 'slösar'], 'slös']],
  tamil: [[['பள்ளிக்கு', 'பள்ளியில்'], 'பள்ளி'], [['வீட்டில்'], 'வீடு'], [['நாடுகள்'], 'நாடு']],
  turkish: [[['doyurdu', 'doyursun'], 'doyur'], [['katılımcılar', 'katılımcılara'], 'katılımcı'], [['sürdürmekte', 'sürdürmektedir'], 'sürdürmek']],
};

test(`stemmers: every Snowball language on words of its published sample (${SNOWBALL_DATA})`, (t) => {
  t.deepEqual(Object.keys(STEMS).sort(), [...(loadOpenApi().components.schemas.SnowballLanguage.enum as string[])].sort());
  for (const [lang, rows] of Object.entries(STEMS)) {
    const stem = stemmerFor(lang)!;
    for (const [words, expected] of rows) for (const w of words) t.is(stem(w), expected, `${lang}: ${w}`);
  }
});

test(`stemmers through the index: two forms of a word match each other with the language's stemmer, not without (${SNOWBALL_DATA})`, (t) => {
  for (const [lang, rows] of Object.entries(STEMS)) {
    const pair = rows.find(([ws]) => ws.length === 2)!;
    const [a, b] = pair[0];
    const points = [{ s: `${a} quiver` }, { s: 'quiver' }];
    // The word tokenizer splits Tamil words at the virama (not alphanumeric, as in the
    // reference's word tokenizer): Tamil words are whole with the multilingual one.
    const tokenizer = lang === 'tamil' ? 'multilingual' : 'word';
    const stemmed = run(points, { type: 'text', tokenizer, stemmer: { type: 'snowball', language: lang } }, { match: { text: b } });
    t.deepEqual(stemmed.viaIndex, [0], `${lang}: "${b}" finds "${a}"`);
    t.deepEqual(stemmed.scan, [0], lang);
    t.deepEqual(run(points, { type: 'text', tokenizer }, { match: { text: b } }).viaIndex, [], `${lang}: no stemmer, no match`);
  }
});

/**
 * Stopwords: a common function word of each language (its "and", or for Kazakh "мен",
 * Romanian "este") is in the reference's list for the language (NLTK's stopwords corpus;
 * stopwords-iso for Japanese) and in the one used here (text-languages.ts).
 */
const STOPWORD_OF: Record<string, string> = {
  arabic: 'في', basque: 'eta', bengali: 'এবং', catalan: 'i', chinese: '的', danish: 'og', dutch: 'en', english: 'and',
  finnish: 'ja', french: 'et', german: 'und', greek: 'και', hebrew: 'את', hungarian: 'és', indonesian: 'dan',
  italian: 'e', japanese: 'の', kazakh: 'мен', nepali: 'र', norwegian: 'og', portuguese: 'e', romanian: 'este',
  russian: 'и', slovene: 'in', spanish: 'y', swedish: 'och', turkish: 've',
};

test(`stopwords: each language with a list drops its words from documents and queries (${DOC_INDEXING})`, (t) => {
  for (const [lang, w] of Object.entries(STOPWORD_OF)) {
    t.true(stopwordList(lang)!.has(w), `${lang}: "${w}"`);
    const points = [{ s: `alpha ${w}` }, { s: 'beta' }, { s: w }];
    const sw = { type: 'text', stopwords: lang };
    t.deepEqual(run(points, sw, { match: { text: w } }).scan, [], `${lang}: a query of stopwords only matches nothing`);
    t.deepEqual(run(points, sw, { match: { text: `${w} beta` } }).viaIndex, [1], `${lang}: the stopword is not required`);
    t.deepEqual(run(points, { type: 'text' }, { match: { text: w } }).viaIndex, [0, 2], `${lang}: without stopwords it is a word`);
  }
});

test('stopwords: the NLTK lists carry the corpus changes after the packaged release (NLTK stopwords corpus, as the reference uses)', (t) => {
  for (const [lang, w] of [['french', 'les'], ['french', 'ils'], ['german', 'dass'], ['portuguese', 'ser'], ['portuguese', 'é'], ['spanish', 'vosotros']]) {
    t.true(stopwordList(lang)!.has(w), `${lang}: "${w}"`);
  }
  t.false(stopwordList('spanish')!.has('vosostros'), 'the misspelling is gone');
  t.is(stopwordList('english')!.size, 179, 'English is the list it was');
});

/**
 * The three lists written for Quiver (stopwords-authored.ts; the reference's lists for
 * these languages were not consulted): each word is what the `word` tokenizer makes of it
 * (lowercase, one token), and a sentence of each language loses its function words in
 * the index and in queries, as the other lists do (a query of stopwords only matches
 * nothing, as "the" does with the English list: DOC_INDEXING).
 */
const AUTHORED: Record<string, { list: readonly string[]; texts: string[]; query: string; only: string; phrase: string; dropped: string }> = {
  azerbaijani: {
    list: AZERBAIJANI_STOPWORDS,
    texts: ['Mən bu kitabı sənin üçün aldım və o da oxudu', 'kitabı', 'Onlar bizim evimizdə idilər'],
    query: 'bu kitabı üçün',
    only: 'mən və o da onlar bizim idilər',
    phrase: 'kitabı sənin üçün aldım',
    dropped: 'üçün',
  },
  tajik: {
    list: TAJIK_STOPWORDS,
    texts: ['Ман ин китобро барои ту харидам ва ӯ низ хонд', 'китобро', 'Онҳо дар хонаи мо буданд'],
    query: 'ин китобро барои',
    only: 'ман ва ӯ низ онҳо дар мо буданд',
    phrase: 'китобро барои ту харидам',
    dropped: 'барои',
  },
  hinglish: {
    list: HINGLISH_ROMANIZED_STOPWORDS,
    texts: ['Main ne yeh movie kal dekhi aur mujhe bahut pasand aayi', 'movie', 'The songs were good, kya baat hai yaar'],
    query: 'yeh movie aur',
    only: 'main ne yeh aur mujhe the were kya hai nahi nahin nhi',
    phrase: 'movie kal dekhi aur mujhe bahut pasand',
    dropped: 'aur',
  },
};

test('stopwords: the lists written for Quiver hold tokens: each word is what the word tokenizer makes of it', (t) => {
  const tok = new TextTokenizer(undefined);
  for (const [lang, { list }] of Object.entries(AUTHORED)) {
    for (const w of list) t.deepEqual(tok.sequence(w), [w], `${lang}: "${w}"`);
    const set = stopwordList(lang)!;
    for (const w of list) t.true(set.has(w), `${lang}: "${w}" served`);
  }
  const hinglish = stopwordList('hinglish')!;
  for (const w of stopwordList('english')!) t.true(hinglish.has(w), `hinglish has the English "${w}"`);
  t.is(hinglish.size, new Set([...stopwordList('english')!, ...HINGLISH_ROMANIZED_STOPWORDS]).size, 'English and the romanized Hindi words, nothing else');
  for (const w of ['hai', 'h', 'nahi', 'nahin', 'nhi', 'kya', 'kyaa']) t.true(hinglish.has(w), `hinglish chat spelling "${w}"`);
});

test(`stopwords: azerbaijani, hinglish and tajik drop their function words from documents and queries, by name and code (${DOC_INDEXING})`, (t) => {
  const codes: Record<string, string> = { azerbaijani: 'az', hinglish: 'hi-en', tajik: 'tg' };
  for (const [lang, c] of Object.entries(AUTHORED)) {
    const points = c.texts.map((s) => ({ s }));
    for (const stopwords of [lang, { languages: [codes[lang]] }]) {
      const sw = { type: 'text', stopwords, phrase_matching: true };
      const q = run(points, sw, { match: { text: c.query } });
      t.deepEqual(q.viaIndex, [0, 1], `${lang}: only the content word of "${c.query}" is required`);
      t.deepEqual(q.scan, [0, 1], lang);
      t.deepEqual(run(points, sw, { match: { text: c.only } }).scan, [], `${lang}: a query of stopwords only matches nothing`);
      t.deepEqual(run(points, sw, { match: { text: c.dropped } }).viaIndex, [], `${lang}: "${c.dropped}" is not indexed`);
      t.deepEqual(run(points, sw, { match: { phrase: c.phrase } }).viaIndex, [0], `${lang}: the phrase's function words are dropped from it and from the text`);
    }
    t.deepEqual(run(points, { type: 'text' }, { match: { text: c.dropped } }).viaIndex, [0], `${lang}: without stopwords "${c.dropped}" is a word`);
    t.deepEqual(run(points, { type: 'text' }, { match: { text: c.query } }).viaIndex, [0], `${lang}: without stopwords every word of the query is required`);
  }
});

test(`stopwords: languages and custom words combine; list words are lowercased with lowercase on and compared as they are with it off (${DOC_INDEXING})`, (t) => {
  const points = [{ s: 'Der Hund und die Katze' }, { s: 'el perro y el gato' }, { s: 'Und' }, { s: 'example' }];
  const schema = { type: 'text', stopwords: { languages: ['german', 'spanish'], custom: ['Example'] } };
  t.deepEqual(run(points, schema, { match: { text: 'und katze' } }).viaIndex, [0]);
  t.deepEqual(run(points, schema, { match: { text: 'UND' } }).scan, []);
  t.deepEqual(run(points, schema, { match: { text: 'y gato' } }).viaIndex, [1]);
  t.deepEqual(run(points, schema, { match: { text: 'EXAMPLE' } }).scan, [], 'custom words are lowercased too');
  const exact = { type: 'text', lowercase: false, stopwords: 'german' };
  t.deepEqual(run(points, exact, { match: { text: 'Und' } }).viaIndex, [2], '"Und" is not the listed "und" without lowercasing');
  t.deepEqual(run(points, exact, { match: { text: 'und Katze' } }).viaIndex, [0]);
});

test(`stemmer with stopwords and the multilingual tokenizer: stopwords are removed before stemming, phrases count the remaining words (${DOC_INDEXING})`, (t) => {
  const points = [{ s: 'Les impressions et les contrariétés' }, { s: 'une impression' }, { s: 'contrariété, impression' }];
  const schema = { type: 'text', tokenizer: 'multilingual', stopwords: 'french', stemmer: { type: 'snowball', language: 'french' }, phrase_matching: true };
  t.deepEqual(run(points, schema, { match: { text: 'impression' } }).viaIndex, [0, 1, 2]);
  t.deepEqual(run(points, schema, { match: { text: 'les contrariété' } }).viaIndex, [0, 2]);
  t.deepEqual(run(points, schema, { match: { phrase: 'impressions contrariété' } }).viaIndex, [0], '"et les" dropped between them');
  t.deepEqual(run(points, schema, { match: { phrase: 'contrariétés impressions' } }).viaIndex, [2]);
  const ru = { type: 'text', tokenizer: 'multilingual', stopwords: 'russian', stemmer: { type: 'snowball', language: 'russian' } };
  t.deepEqual(run([{ s: 'Он объявляет и объявляется' }, { s: 'задатки' }], ru, { match: { text: 'и объявляет' } }).viaIndex, [0]);
  t.deepEqual(run([{ s: 'Он объявляет' }, { s: 'задатки' }], ru, { match: { text: 'задатка' } }).viaIndex, [1]);
});

/**
 * The reference checks `min_token_len` / `max_token_len` on the stemmed token: its tokens
 * processor lowercases, drops stopwords, stems, then drops tokens outside the bounds
 * (qdrant/qdrant lib/segment/src/index/field_index/full_text_index/tokenizers/tokens_processor.rs,
 * `process_token_cow`). Porter2: running -> run, jumping -> jump, generously -> generous.
 */
const REF_TOKENS_PROCESSOR = 'https://github.com/qdrant/qdrant/blob/master/lib/segment/src/index/field_index/full_text_index/tokenizers/tokens_processor.rs';

test(`token length bounds count the characters of the stem, not of the word (${REF_TOKENS_PROCESSOR})`, (t) => {
  t.is(stemEnglish('running'), 'run');
  t.is(stemEnglish('jumping'), 'jump');
  t.is(stemEnglish('generously'), 'generous');
  const stemmer = { type: 'snowball', language: 'english' };
  const short = [{ s: 'running fast' }, { s: 'runner' }, { s: 'jumping' }];
  const min4 = { type: 'text', min_token_len: 4, stemmer };
  t.deepEqual(run(short, min4, { match: { text: 'running' } }).scan, [], '"run" is shorter than 4: dropped from the document and the query');
  t.deepEqual(run(short, min4, { match: { text: 'jumping' } }).viaIndex, [2], '"jump" has 4 characters');
  t.deepEqual(run(short, min4, { match: { text: 'running fast' } }).viaIndex, [0], 'only "fast" is required');
  t.deepEqual(run(short, { type: 'text', min_token_len: 4 }, { match: { text: 'running' } }).viaIndex, [0], 'without a stemmer "running" has 7');
  const long = [{ s: 'generously given' }, { s: 'generous' }, { s: 'given' }];
  const max8 = { type: 'text', max_token_len: 8, stemmer };
  const g = run(long, max8, { match: { text: 'generously' } });
  t.deepEqual(g.viaIndex, [0, 1], '"generously" stems to "generous", 8 characters: kept in the document and the query');
  t.deepEqual(g.scan, [0, 1]);
  t.deepEqual(run(long, { type: 'text', max_token_len: 8 }, { match: { text: 'generously' } }).scan, [], 'without a stemmer it has 10: dropped');
  const prefix = run(short, { type: 'text', tokenizer: 'prefix', min_token_len: 4, stemmer }, { match: { text: 'jump' } });
  t.deepEqual(prefix.viaIndex, [2], 'prefix: the stem "jump" is indexed with its prefixes from 4 characters');
  t.deepEqual(run(short, { type: 'text', tokenizer: 'prefix', min_token_len: 4, stemmer }, { match: { text: 'running' } }).scan, [], 'prefix: the stem "run" is shorter than 4');
});

// ---------------------------------------------------------------------------------
// randomized against a naive scan

const VOCAB = ['red', 'Red', 'blue', 'green', 'apple', 'pear', 'x1', 'über', 'Über', 'dog', 'cat', 'sky'];
const SEPS = [' ', ', ', '-', '_', '.', '  ', '!'];

/** The test's own tokenizer: word characters (letters incl. ü, digits) lowercased. */
function naiveTokens(s: string): string[] {
  return s
    .toLowerCase()
    .split(/[^a-z0-9ü]+/)
    .filter((x) => x.length > 0);
}

function naiveMatch(kind: 'text' | 'text_any' | 'phrase', q: string, value: unknown): boolean {
  const strings = (Array.isArray(value) ? value : [value]).filter((v): v is string => typeof v === 'string');
  if (strings.length === 0) return false;
  const qt = naiveTokens(q);
  const all = new Set(strings.flatMap(naiveTokens));
  if (kind === 'text') return qt.length > 0 && qt.every((x) => all.has(x));
  if (kind === 'text_any') return qt.some((x) => all.has(x));
  if (qt.length === 0) return false;
  return strings.some((s) => {
    const seq = naiveTokens(s);
    for (let i = 0; i + qt.length <= seq.length; i++) if (qt.every((x, j) => seq[i + j] === x)) return true;
    return false;
  });
}

test('randomized: index + predicate agree with a naive scan, across updates', (t) => {
  const seed = process.env.TEXT_INDEX_SEED ? Number(process.env.TEXT_INDEX_SEED) : (Date.now() ^ (Math.random() * 2 ** 31)) >>> 0;
  t.log(`TEXT_INDEX_SEED=${seed}`);
  const rnd = mulberry32(seed);
  const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const sentence = () => Array.from({ length: int(0, 6) }, () => pick(VOCAB) + pick(SEPS)).join('');
  const value = (): unknown => {
    const r = rnd();
    if (r < 0.1) return int(0, 5);
    if (r < 0.25) return Array.from({ length: int(0, 3) }, sentence);
    return sentence();
  };
  const N = 800;
  const payloads = new Map<number, P>();
  for (let i = 0; i < N; i++) payloads.set(i, rnd() < 0.05 ? null : { s: value() });
  const pi = new PayloadIndexes();
  pi.create('s', parseFieldSchema({ type: 'text', phrase_matching: true }), [...payloads].map(([o, p]) => [BigInt(o), p] as [bigint, P]));
  let nonEmpty = 0;
  for (let round = 0; round < 3; round++) {
    for (let qi = 0; qi < 60; qi++) {
      const kind = pick(['text', 'text_any', 'phrase'] as const);
      const q = Array.from({ length: int(1, 3) }, () => pick(VOCAB)).join(pick([' ', ', ']));
      const f = validateFilter({ must: [{ key: 's', match: { [kind]: q } }] }) as Filter;
      const pred = compileFilter(f, (n, m) => pi.textMatcher(n, m));
      const naive = [...payloads].filter(([, p]) => p !== null && naiveMatch(kind, q, p.s)).map(([o]) => o).sort((a, b) => a - b);
      const scan = [...payloads].filter(([o, p]) => pred(o, p)).map(([o]) => o).sort((a, b) => a - b);
      const c = pi.candidates(f);
      if (c === null) return t.fail(`TEXT_INDEX_SEED=${seed}: ${kind} ${q} not answered by the index`);
      const viaIndex = [...c].map(Number).filter((o) => pred(o, payloads.get(o) ?? null)).sort((a, b) => a - b);
      t.deepEqual(scan, naive, `TEXT_INDEX_SEED=${seed} ${kind} "${q}": predicate`);
      t.deepEqual(viaIndex, naive, `TEXT_INDEX_SEED=${seed} ${kind} "${q}": index`);
      if (naive.length > 0) nonEmpty++;
    }
    for (let u = 0; u < 300; u++) {
      const o = int(0, N + 100);
      if (rnd() < 0.15) {
        payloads.delete(o);
        pi.update(BigInt(o), null);
      } else {
        const p = { s: value() };
        payloads.set(o, p);
        pi.update(BigInt(o), p);
      }
    }
  }
  t.true(nonEmpty > 30, `only ${nonEmpty} queries matched anything`);
});

test('prefix tokenizer without max_token_len: a very long word costs linear memory, and queries longer than the indexed prefixes still match exactly', (t) => {
  // Every prefix of a 200,000-character word, each its own string, would be about 2e10
  // characters: the write (logged before it is applied) would take the process down, and
  // so would every replay of the WAL after it.
  const long = 'a'.repeat(100_000) + 'b'.repeat(100_000);
  const pi = new PayloadIndexes();
  const points: P[] = [{ s: long }, { s: 'a'.repeat(100) + 'c' }, { s: 'abc xyz' }, { s: 'a'.repeat(40) }];
  const started = Date.now();
  pi.create('s', parseFieldSchema({ type: 'text', tokenizer: 'prefix' }), points.map((p, i) => [BigInt(i), p] as [bigint, P]));
  t.true(Date.now() - started < 5_000, `indexing took ${Date.now() - started} ms`);
  const q = (text: string) => {
    const f = validateFilter({ must: [{ key: 's', match: { text } }] }) as Filter;
    const pred = compileFilter(f, (n, m) => pi.textMatcher(n, m));
    const viaIndex = [...(pi.candidates(f) ?? [])].map(Number).filter((o) => pred(o, points[o])).sort((a, b) => a - b);
    const scan = points.map((p, i) => (pred(i as PointId, p) ? i : -1)).filter((i) => i >= 0);
    t.deepEqual(viaIndex, scan, text.slice(0, 20));
    return scan;
  };
  t.deepEqual(q('a'), [0, 1, 2, 3]);
  t.deepEqual(q('abc'), [2]);
  t.deepEqual(q('a'.repeat(40)), [0, 1, 3]);
  t.deepEqual(q('a'.repeat(41)), [0, 1]);
  t.deepEqual(q('a'.repeat(100)), [0, 1]);
  t.deepEqual(q('a'.repeat(100) + 'c'), [1]);
  t.deepEqual(q('a'.repeat(100_000) + 'b'), [0]);
  t.deepEqual(q(long), [0]);
  t.deepEqual(q(long + 'b'), []);
  t.deepEqual(q('a'.repeat(100) + 'c xyz'), []);
});

test('prefix tokenizer with a large max_token_len: long words are cut to it, queries beyond the indexed prefixes match as before', (t) => {
  const points: P[] = [{ s: 'x'.repeat(300_000) }, { s: 'x'.repeat(50) + 'y' }, { s: 'x'.repeat(60) }];
  const pi = new PayloadIndexes();
  pi.create('s', parseFieldSchema({ type: 'text', tokenizer: 'prefix', max_token_len: 1_000_000 }), points.map((p, i) => [BigInt(i), p] as [bigint, P]));
  const q = (text: string) => {
    const f = validateFilter({ must: [{ key: 's', match: { text_any: text } }] }) as Filter;
    const pred = compileFilter(f, (n, m) => pi.textMatcher(n, m));
    const viaIndex = [...(pi.candidates(f) ?? [])].map(Number).filter((o) => pred(o, points[o])).sort((a, b) => a - b);
    const scan = points.map((p, i) => (pred(i as PointId, p) ? i : -1)).filter((i) => i >= 0);
    t.deepEqual(viaIndex, scan);
    return scan;
  };
  t.deepEqual(q('x'.repeat(55)), [0, 2]);
  t.deepEqual(q('x'.repeat(50) + 'y'), [1]);
  t.deepEqual(q('x'.repeat(61)), [0]);
  t.deepEqual(q('zz ' + 'x'.repeat(61)), [0]);
});

test('prefix tokenizer with min_token_len beyond the indexed prefixes: words still match by their prefixes', (t) => {
  const points: P[] = [{ s: 'q'.repeat(45) + 'r' }, { s: 'q'.repeat(39) }, { s: 'q'.repeat(41) }];
  const r = run(points, { type: 'text', tokenizer: 'prefix', min_token_len: 40 }, { match: { text: 'q'.repeat(41) } });
  t.deepEqual(r.scan, [0, 2]);
  t.deepEqual(r.viaIndex, [0, 2]);
  const r2 = run(points, { type: 'text', tokenizer: 'prefix', min_token_len: 40 }, { match: { text: 'q'.repeat(40) } });
  t.deepEqual(r2.viaIndex, [0, 2]);
});
