/**
 * Object types spelled out field by field.
 *
 * Owns: `EveryField`. Must never: hold values.
 */

/**
 * `T` with every field, optional ones too, required to be written (with `undefined` where
 * absent). An object built field by field rather than spread (one hidden class on hot
 * paths, docs/rest.md) is typed with it, so a field added to `T` later fails to compile
 * where the object is built instead of being silently dropped.
 */
export type EveryField<T> = { [K in keyof Required<T>]: T[K] };
