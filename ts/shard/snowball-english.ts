/**
 * The Snowball English ("Porter2") stemmer, written from the algorithm's published
 * description (snowballstem.org, "The English (Porter2) stemming algorithm"): the
 * exceptional forms, R1/R2 (with the gener/commun/arsen prefixes), steps 0, 1a, 1b,
 * 1c, 2, 3, 4, 5, and y/Y marking. Input is one lowercase word; words of one or two
 * letters are returned as they are.
 *
 * Owns: English stemming. Must never: tokenize or lowercase (the text index does).
 */

const EXCEPTIONS: ReadonlyMap<string, string> = new Map([
  ['skis', 'ski'],
  ['skies', 'sky'],
  ['dying', 'die'],
  ['lying', 'lie'],
  ['tying', 'tie'],
  ['idly', 'idl'],
  ['gently', 'gentl'],
  ['ugly', 'ugli'],
  ['early', 'earli'],
  ['only', 'onli'],
  ['singly', 'singl'],
  ['sky', 'sky'],
  ['news', 'news'],
  ['howe', 'howe'],
  ['atlas', 'atlas'],
  ['cosmos', 'cosmos'],
  ['bias', 'bias'],
  ['andes', 'andes'],
]);

/** Left alone once step 1a is done. */
const AFTER_1A = new Set(['inning', 'outing', 'canning', 'herring', 'earring', 'proceed', 'exceed', 'succeed']);

const isVowel = (c: string | undefined): boolean =>
  c === 'a' || c === 'e' || c === 'i' || c === 'o' || c === 'u' || c === 'y';

const DOUBLES = new Set(['bb', 'dd', 'ff', 'gg', 'mm', 'nn', 'pp', 'rr', 'tt']);
const LI_ENDING = new Set(['c', 'd', 'e', 'g', 'h', 'k', 'm', 'n', 'r', 't']);

/** The start of the region after the first non-vowel that follows a vowel, from `from`. */
function regionAfter(w: string, from: number): number {
  for (let i = from + 1; i < w.length; i++) if (!isVowel(w[i]) && isVowel(w[i - 1])) return i + 1;
  return w.length;
}

/** Whether the word ends in a short syllable (the description's definition). */
function endsShortSyllable(w: string): boolean {
  const n = w.length;
  if (n === 2) return isVowel(w[0]) && !isVowel(w[1]);
  if (n < 3) return false;
  const a = w[n - 3];
  const b = w[n - 2];
  const c = w[n - 1];
  return !isVowel(a) && isVowel(b) && !isVowel(c) && c !== 'w' && c !== 'x' && c !== 'Y';
}

/** The longest of `suffixes` the word ends with, or null. */
function longest(w: string, suffixes: readonly string[]): string | null {
  let best: string | null = null;
  for (const s of suffixes) if (w.endsWith(s) && (best === null || s.length > best.length)) best = s;
  return best;
}

const STEP2: ReadonlyArray<readonly [string, string]> = [
  ['tional', 'tion'],
  ['enci', 'ence'],
  ['anci', 'ance'],
  ['abli', 'able'],
  ['entli', 'ent'],
  ['izer', 'ize'],
  ['ization', 'ize'],
  ['ational', 'ate'],
  ['ation', 'ate'],
  ['ator', 'ate'],
  ['alism', 'al'],
  ['aliti', 'al'],
  ['alli', 'al'],
  ['fulness', 'ful'],
  ['ousli', 'ous'],
  ['ousness', 'ous'],
  ['iveness', 'ive'],
  ['iviti', 'ive'],
  ['biliti', 'ble'],
  ['bli', 'ble'],
  ['ogi', 'og'],
  ['fulli', 'ful'],
  ['lessli', 'less'],
  ['li', ''],
];
const STEP2_MAP = new Map(STEP2);
const STEP2_KEYS = STEP2.map(([s]) => s);

const STEP3: ReadonlyArray<readonly [string, string]> = [
  ['tional', 'tion'],
  ['ational', 'ate'],
  ['alize', 'al'],
  ['icate', 'ic'],
  ['iciti', 'ic'],
  ['ical', 'ic'],
  ['ful', ''],
  ['ness', ''],
  ['ative', ''],
];
const STEP3_MAP = new Map(STEP3);
const STEP3_KEYS = STEP3.map(([s]) => s);

const STEP4 = ['al', 'ance', 'ence', 'er', 'ic', 'able', 'ible', 'ant', 'ement', 'ment', 'ent', 'ism', 'ate', 'iti', 'ous', 'ive', 'ize', 'ion'];

export function stemEnglish(word: string): string {
  if (word.length <= 2) return word;
  const exc = EXCEPTIONS.get(word);
  if (exc !== undefined) return exc;

  let w = word.startsWith("'") ? word.slice(1) : word;
  if (w.length === 0) return w;
  // mark consonant y: initial, or after a vowel
  let marked = '';
  for (let i = 0; i < w.length; i++) {
    const c = w[i];
    marked += c === 'y' && (i === 0 || isVowel(marked[i - 1])) ? 'Y' : c;
  }
  w = marked;

  let r1: number;
  if (w.startsWith('gener') || w.startsWith('arsen')) r1 = 5;
  else if (w.startsWith('commun')) r1 = 6;
  else r1 = regionAfter(w, 0);
  const r2 = regionAfter(w, r1);
  const inR1 = (suffixLen: number) => w.length - suffixLen >= r1;
  const inR2 = (suffixLen: number) => w.length - suffixLen >= r2;

  // step 0
  const s0 = longest(w, ["'s'", "'s", "'"]);
  if (s0 !== null) w = w.slice(0, -s0.length);

  // step 1a
  const s1a = longest(w, ['sses', 'ied', 'ies', 'us', 'ss', 's']);
  if (s1a === 'sses') w = w.slice(0, -2);
  else if (s1a === 'ied' || s1a === 'ies') w = w.slice(0, -3) + (w.length - 3 > 1 ? 'i' : 'ie');
  else if (s1a === 's') {
    const stem = w.slice(0, -1);
    // a vowel somewhere before the letter just before the s
    let vowel = false;
    for (let i = 0; i < stem.length - 1; i++) if (isVowel(stem[i])) vowel = true;
    if (vowel) w = stem;
  }

  if (AFTER_1A.has(w)) return w.replace(/Y/g, 'y');

  // step 1b
  const s1b = longest(w, ['eed', 'eedly', 'ed', 'edly', 'ing', 'ingly']);
  if (s1b === 'eed' || s1b === 'eedly') {
    if (inR1(s1b.length)) w = w.slice(0, -s1b.length) + 'ee';
  } else if (s1b !== null) {
    const stem = w.slice(0, -s1b.length);
    let vowel = false;
    for (const c of stem) if (isVowel(c)) vowel = true;
    if (vowel) {
      w = stem;
      if (w.endsWith('at') || w.endsWith('bl') || w.endsWith('iz')) w += 'e';
      else if (DOUBLES.has(w.slice(-2))) w = w.slice(0, -1);
      else if (r1 >= w.length && endsShortSyllable(w)) w += 'e';
    }
  }

  // step 1c
  {
    const last = w[w.length - 1];
    if ((last === 'y' || last === 'Y') && w.length > 2 && !isVowel(w[w.length - 2])) w = w.slice(0, -1) + 'i';
  }

  // step 2
  const s2 = longest(w, STEP2_KEYS);
  if (s2 !== null && inR1(s2.length)) {
    const before = w[w.length - s2.length - 1];
    if (s2 === 'ogi') {
      if (before === 'l') w = w.slice(0, -3) + 'og';
    } else if (s2 === 'li') {
      if (before !== undefined && LI_ENDING.has(before)) w = w.slice(0, -2);
    } else w = w.slice(0, -s2.length) + STEP2_MAP.get(s2)!;
  }

  // step 3
  const s3 = longest(w, STEP3_KEYS);
  if (s3 !== null && inR1(s3.length)) {
    if (s3 === 'ative') {
      if (inR2(5)) w = w.slice(0, -5);
    } else w = w.slice(0, -s3.length) + STEP3_MAP.get(s3)!;
  }

  // step 4
  const s4 = longest(w, STEP4);
  if (s4 !== null && inR2(s4.length)) {
    if (s4 === 'ion') {
      const before = w[w.length - 4];
      if (before === 's' || before === 't') w = w.slice(0, -3);
    } else w = w.slice(0, -s4.length);
  }

  // step 5
  const last = w[w.length - 1];
  if (last === 'e') {
    if (inR2(1) || (inR1(1) && !endsShortSyllable(w.slice(0, -1)))) w = w.slice(0, -1);
  } else if (last === 'l') {
    if (inR2(1) && w[w.length - 2] === 'l') w = w.slice(0, -1);
  }

  return w.replace(/Y/g, 'y');
}
