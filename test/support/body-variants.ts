/**
 * Request bodies generated from the reference's OpenAPI document: for one schema, a
 * list of values that together exercise every variant in it at least once — each
 * branch of every `anyOf`/`oneOf`, every optional property present (and `null` where
 * the document allows it), both booleans, every enum value — each value otherwise
 * minimal (required properties only).
 *
 * Each named schema is expanded once per root (the first place the walk reaches it);
 * later occurrences, and recursive ones, take its baseline. So the number of bodies
 * is the number of variants, not their product.
 *
 * What the document cannot say (a vector's size, which ids exist, which payload keys
 * are indexed) comes from `semantic`: it may replace the variants of any schema or
 * property with values that make sense for the data a test prepared. Variants carry
 * labels (where in the body the variant is) for the test's messages and allow-lists.
 */

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Schema = { [k: string]: any };

export interface Variant {
  /** Where the variant is, e.g. `filter.must<Condition#3 HasIdCondition>`; empty for the baseline. */
  label: string;
  value: Json;
}

/** Where the walk is when it asks for values. */
export interface Site {
  /** The nearest named schema enclosing this value (or the value's own schema when named). */
  schema: string;
  /** The property of `parent` this value is (undefined at array items and branches). */
  prop?: string;
  /** The named schema that has `prop`. */
  parent?: string;
  /** Named schemas from the root down to here. */
  stack: readonly string[];
  /** True where the value is the named schema itself (not a property, item or branch inside it). */
  own?: boolean;
}

/**
 * Semantic values: return variants (the first is the baseline) to use instead of what
 * the document would generate at this site, or undefined to let the walk generate.
 * Called for every named schema (`site.schema` is its name, before it is expanded) and
 * every property (`site.prop` set).
 */
export type Semantic = (site: Site) => Variant[] | undefined;

export interface GeneratorOptions {
  /** Values of the document's schemas that make sense for the test's data (see Semantic). */
  semantic?: Semantic;
  /**
   * Properties to add to the baseline of an object schema, by schema name: the first
   * alternative that does not set the property a variant is about (e.g. a FieldCondition
   * needs one condition besides its key, a RecommendInput a positive example).
   */
  extras?: Record<string, Array<Record<string, Json>>>;
  /** The key of a map's one entry, by the schema that has the map (default `k`). */
  mapKeys?: Record<string, string>;
  /** Properties expanded after the others (so that the first expansion of a shared schema is at the top). */
  late?: readonly string[];
  /** How deep named schemas may nest in a baseline before the walk prefers non-recursive branches. */
  maxDepth?: number;
}

interface Gen {
  base: Json;
  more: Variant[];
}

const REF = '#/components/schemas/';

function clone<T extends Json>(x: T): T {
  return JSON.parse(JSON.stringify(x)) as T;
}

function join(a: string, b: string): string {
  if (a === '') return b;
  if (b === '') return a;
  return b.startsWith('<') || b.startsWith('[') || b.startsWith('=') ? `${a}${b}` : `${a}.${b}`;
}

export class BodyGenerator {
  private readonly schemas: Record<string, Schema>;
  private expanded = new Set<string>();
  private readonly semantic: Semantic;
  private readonly maxDepth: number;

  constructor(
    doc: { components: { schemas: Record<string, Schema> } },
    private readonly options: GeneratorOptions = {},
  ) {
    this.schemas = doc.components.schemas;
    this.semantic = options.semantic ?? (() => undefined);
    this.maxDepth = options.maxDepth ?? 10;
  }

  /** The baseline body of a named schema first, then one body per other variant. */
  variants(root: string): Variant[] {
    this.expanded = new Set();
    const g = this.ref(root, { schema: root, stack: [] }, true);
    return [{ label: '', value: g.base }, ...g.more];
  }

  private named(ref: string): string {
    if (!ref.startsWith(REF)) throw new Error(`unexpected reference ${ref}`);
    return ref.slice(REF.length);
  }

  private ref(name: string, site: Site, expand: boolean): Gen {
    const s = this.schemas[name];
    if (s === undefined) throw new Error(`no schema ${name}`);
    const here: Site = { ...site, schema: name, stack: [...site.stack, name], own: true };
    const custom = this.semantic({ ...here, prop: undefined, parent: undefined });
    if (custom !== undefined) return this.fromCustom(custom, expand && !this.expanded.has(name));
    const recursive = site.stack.includes(name);
    const doExpand = expand && !recursive && !this.expanded.has(name);
    if (doExpand) this.expanded.add(name);
    return this.gen(s, here, doExpand);
  }

  private fromCustom(vs: Variant[], expand: boolean): Gen {
    if (vs.length === 0) throw new Error('a semantic hook returned no variants');
    return { base: vs[0].value, more: expand ? vs.slice(1) : [] };
  }

  /** Whether a baseline of `s` would recurse into a schema already on the stack. */
  private recursesInto(s: Schema, stack: readonly string[]): boolean {
    if (typeof s.$ref === 'string') return stack.includes(this.named(s.$ref));
    if (s.type === 'array' && s.items) return this.recursesInto(s.items, stack);
    return false;
  }

  private gen(s: Schema, site: Site, expand: boolean): Gen {
    if (typeof s.$ref === 'string') return this.ref(this.named(s.$ref), site, expand);
    const alts: Schema[] | undefined = s.anyOf ?? s.oneOf;
    if (alts !== undefined) return this.alternatives(alts, site, expand, s.nullable === true);
    if (s.allOf !== undefined) {
      if (s.allOf.length !== 1) throw new Error(`allOf with ${s.allOf.length} parts at ${site.stack.join('/')}`);
      return this.gen(s.allOf[0], site, expand);
    }
    const nullVariant: Variant[] = expand && s.nullable === true ? [{ label: '=null', value: null }] : [];
    if (Array.isArray(s.enum)) {
      const values = s.enum.filter((v: Json) => v !== null) as Json[];
      return { base: values[0], more: expand ? [...values.slice(1).map((v) => ({ label: `=${JSON.stringify(v)}`, value: v })), ...nullVariant] : [] };
    }
    switch (s.type) {
      case 'object':
      case undefined:
        if (s.properties !== undefined || s.type === 'object') return this.object(s, site, expand);
        // A schema without a type (any JSON value): a string does.
        return { base: 'any', more: [] };
      case 'array': {
        const items = this.gen(s.items ?? {}, { ...site, prop: undefined, parent: undefined, own: false }, expand);
        const n = Math.max(1, s.minItems ?? 1);
        const arr = (v: Json): Json => Array.from({ length: n }, () => clone(v));
        return { base: arr(items.base), more: [...items.more.map((v) => ({ label: join('[]', v.label), value: arr(v.value) })), ...nullVariant] };
      }
      case 'string':
        return { base: this.string(s), more: nullVariant };
      case 'integer': {
        const min = typeof s.minimum === 'number' ? s.minimum : 0;
        return { base: Math.max(min, 1), more: nullVariant };
      }
      case 'number': {
        const min = typeof s.minimum === 'number' ? s.minimum : 0;
        const max = typeof s.maximum === 'number' ? s.maximum : 1;
        return { base: Math.min(max, Math.max(min, 0.5)), more: nullVariant };
      }
      case 'boolean':
        return { base: false, more: expand ? [{ label: '=true', value: true }, ...nullVariant] : [] };
      default:
        throw new Error(`unknown type ${String(s.type)} at ${site.stack.join('/')}`);
    }
  }

  private string(s: Schema): string {
    switch (s.format) {
      case 'uuid':
        return '5b7f5b4e-3c0d-4f7c-9b55-0f5f1e2f3a4b';
      case 'date-time':
        return '2024-01-02T03:04:05Z';
      case 'partial-date-time':
        return '2024-01-02T03:04:05';
      case 'uri':
        return 'http://example.invalid/x';
      default:
        return 'a';
    }
  }

  private alternatives(alts: Schema[], site: Site, expand: boolean, nullable: boolean): Gen {
    const isNull = (a: Schema) => a.nullable === true && Object.keys(a).every((k) => k === 'nullable' || k === 'description');
    const real = alts.map((a, i) => ({ a, i })).filter(({ a }) => !isNull(a));
    const hasNull = nullable || real.length < alts.length;
    // The baseline: the first branch that does not recurse (when the stack is deep, any non-recursive one).
    const deep = site.stack.length > this.maxDepth;
    const first = real.find(({ a }) => !this.recursesInto(a, site.stack) && (!deep || !this.isRefObject(a))) ?? real.find(({ a }) => !this.recursesInto(a, site.stack)) ?? real[0];
    const branchSite: Site = { ...site, prop: undefined, parent: undefined, own: false };
    const baseGen = this.gen(first.a, branchSite, expand);
    const more: Variant[] = [];
    if (expand) {
      for (const { a, i } of real) {
        const tag = `<${this.branchName(site, a, i)}>`;
        if (a === first.a) {
          more.push(...baseGen.more.map((v) => ({ label: join(tag, v.label), value: v.value })));
          continue;
        }
        const g = this.gen(a, branchSite, true);
        more.push({ label: tag, value: g.base });
        more.push(...g.more.map((v) => ({ label: join(tag, v.label), value: v.value })));
      }
      if (hasNull) more.push({ label: '=null', value: null });
    }
    return { base: baseGen.base, more };
  }

  private isRefObject(a: Schema): boolean {
    return typeof a.$ref === 'string';
  }

  private branchName(site: Site, a: Schema, i: number): string {
    if (typeof a.$ref === 'string') return `${site.schema}#${i} ${this.named(a.$ref)}`;
    return `${site.schema}#${i} ${a.type ?? 'any'}${a.type === 'array' ? ` of ${a.items?.$ref ? this.named(a.items.$ref) : a.items?.type ?? 'any'}` : ''}`;
  }

  private object(s: Schema, site: Site, expand: boolean): Gen {
    const props: Record<string, Schema> = s.properties ?? {};
    const required = new Set<string>(s.required ?? []);
    const gens = new Map<string, Gen>();
    const propGen = (p: string, ex: boolean): Gen => {
      const psite: Site = { schema: site.schema, prop: p, parent: site.schema, stack: site.stack };
      const custom = this.semantic(psite);
      if (custom !== undefined) return this.fromCustom(custom, ex);
      const ps = props[p];
      const g = this.gen(ps, psite, ex);
      // A nullable property written as `{type, nullable: true}` gets its null variant from gen; an `anyOf` with a null branch too.
      return g;
    };
    const base: { [k: string]: Json } = {};
    for (const p of Object.keys(props)) {
      if (!required.has(p)) continue;
      const g = propGen(p, expand);
      gens.set(p, g);
      base[p] = g.base;
    }
    if (s.additionalProperties !== undefined && s.additionalProperties !== false && Object.keys(props).length === 0) {
      // A map: one entry.
      const add = s.additionalProperties === true ? { type: 'string' } : s.additionalProperties;
      const g = this.gen(add, { ...site, prop: undefined, parent: undefined, own: false }, expand);
      const key = this.options.mapKeys?.[site.schema] ?? 'k';
      return {
        base: { [key]: g.base },
        more: g.more.map((v) => ({ label: join(`{${key}}`, v.label), value: { [key]: v.value } })),
      };
    }
    const alternatives = site.own === true ? this.options.extras?.[site.schema] : undefined;
    const withExtras = (p: string | null, value: Json | undefined): Json => {
      const out: { [k: string]: Json } = clone(base);
      const extra = alternatives?.find((a) => p === null || !(p in a));
      if (extra !== undefined) for (const [k, v] of Object.entries(extra)) if (!(k in out)) out[k] = clone(v);
      if (p !== null) out[p] = value as Json;
      return out;
    };
    const more: Variant[] = [];
    if (expand) {
      const late = new Set(this.options.late ?? []);
      const order = [...Object.keys(props).filter((p) => !late.has(p)), ...Object.keys(props).filter((p) => late.has(p))];
      for (const p of order) {
        const g = gens.get(p) ?? propGen(p, true);
        if (!required.has(p)) more.push({ label: p, value: withExtras(p, g.base) });
        for (const v of g.more) more.push({ label: join(p, v.label), value: withExtras(p, v.value) });
      }
    }
    return { base: withExtras(null, undefined), more };
  }
}
