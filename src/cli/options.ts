import { TandemError } from '../errors/index.js';

/**
 * One typed option table per command drives parsing, validation and `--help`
 * (and docs/cli.md through `tandem help --markdown`).
 */
export type OptionType = 'string' | 'number' | 'boolean' | 'list';

export interface OptionSpec {
  type: OptionType;
  description: string;
  /** Shown in help as `--name <placeholder>`. */
  placeholder?: string;
  short?: string;
  choices?: readonly string[];
  default?: string | number | boolean | readonly string[];
  required?: boolean;
}

export type OptionTable = Record<string, OptionSpec>;

/** A string option's value: its `choices` as literal types when the table lists them as literals, else any string. */
type ChoiceOf<S> = S extends { choices: readonly (infer C extends string)[] } ? C : string;

type ValueOf<S extends { type: OptionType }> = S['type'] extends 'number'
  ? number
  : S['type'] extends 'boolean'
    ? boolean
    : S['type'] extends 'list'
      ? ChoiceOf<S>[]
      : ChoiceOf<S>;

/**
 * What parseArgs gives for a table: `choices: ['f32', 'f16']` types the value `'f32' | 'f16'`
 * (defineCommand infers its table as literals; a table written apart needs `as const`).
 */
export type ParsedOptions<T extends OptionTable> = {
  [K in keyof T]: T[K] extends { default: unknown } | { required: true } | { type: 'boolean' }
    ? ValueOf<T[K]>
    : ValueOf<T[K]> | undefined;
};

export interface PositionalSpec {
  name: string;
  description: string;
  required?: boolean;
}

export interface ParsedArgs<T extends OptionTable> {
  options: ParsedOptions<T>;
  positionals: string[];
}

export interface CommandSpec<T extends OptionTable = OptionTable> {
  /** Full name as typed: `devinfo`, `bench fabric`. */
  name: string;
  summary: string;
  description?: string;
  positionals?: readonly PositionalSpec[];
  options: T;
  examples?: readonly string[];
  run(args: ParsedArgs<T>): Promise<number | void>;
}

/** `const T`: the option table is inferred with literal types, so `choices` narrow the parsed values. */
export function defineCommand<const T extends OptionTable>(spec: CommandSpec<T>): CommandSpec<T> {
  return spec;
}

function usageError(
  command: string,
  message: string,
  hint = `run \`tandem ${command} --help\` to see the options`,
): TandemError {
  return new TandemError('CLI_USAGE', `${command}: ${message}`, { hint });
}

function convert(command: string, name: string, spec: OptionSpec, raw: string): string | number | string[] {
  if (spec.type === 'number') {
    const value = Number(raw);
    if (raw.trim() === '' || !Number.isFinite(value)) {
      throw usageError(command, `--${name} expects a number, got '${raw}'`);
    }
    return value;
  }
  if (spec.type === 'list') {
    const items = raw.split(',').map((s) => s.trim());
    // An empty item ('1,,2', '8,') is a typo, and an empty list would silently mean the default.
    if (items.some((s) => s.length === 0)) {
      const what = raw.trim() === '' ? 'is empty' : `has an empty item in '${raw}'`;
      throw usageError(
        command,
        `--${name} ${what}`,
        `pass comma-separated values without empty items; \`tandem ${command} --help\` shows an example`,
      );
    }
    if (spec.choices) for (const item of items) checkChoice(command, name, spec.choices, item);
    return items;
  }
  if (spec.choices) checkChoice(command, name, spec.choices, raw);
  return raw;
}

function checkChoice(command: string, name: string, choices: readonly string[], value: string): void {
  if (!choices.includes(value)) {
    throw usageError(command, `--${name} must be one of ${choices.join('|')}, got '${value}'`);
  }
}

/** Whether `arg` names one of the command's options (`--max-tokens`, `--max-tokens=2`, `--no-json`, `-h`, `--help`). */
function isOwnOption(spec: CommandSpec, arg: string): boolean {
  if (arg === '--help' || arg === '-h') return true;
  if (arg.startsWith('--')) {
    const name = arg.slice(2).split('=')[0] as string;
    return (
      name in spec.options || (name.startsWith('no-') && spec.options[name.slice(3)]?.type === 'boolean')
    );
  }
  return arg.length > 1 && Object.values(spec.options).some((o) => o.short === arg.slice(1));
}

/** Parses argv (after the command name) against a command's option table. */
export function parseArgs<T extends OptionTable>(
  spec: CommandSpec<T>,
  argv: readonly string[],
): ParsedArgs<T> {
  const values: Record<string, unknown> = {};
  const positionals: string[] = [];
  const byShort = new Map<string, string>();
  for (const [name, opt] of Object.entries(spec.options)) if (opt.short) byShort.set(opt.short, name);

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--') {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (!arg.startsWith('-') || arg === '-') {
      positionals.push(arg);
      continue;
    }
    let name: string;
    let inline: string | undefined;
    if (arg.startsWith('--')) {
      const eq = arg.indexOf('=');
      name = eq >= 0 ? arg.slice(2, eq) : arg.slice(2);
      inline = eq >= 0 ? arg.slice(eq + 1) : undefined;
    } else {
      const long = byShort.get(arg.slice(1));
      if (long === undefined) throw usageError(spec.name, `unknown option '${arg}'`);
      name = long;
    }
    let opt = spec.options[name];
    let negated = false;
    if (opt === undefined && name.startsWith('no-') && spec.options[name.slice(3)]?.type === 'boolean') {
      name = name.slice(3);
      opt = spec.options[name];
      negated = true;
    }
    if (opt === undefined) throw usageError(spec.name, `unknown option '--${name}'`);
    if (opt.type === 'boolean') {
      if (inline !== undefined && inline !== 'true' && inline !== 'false') {
        throw usageError(spec.name, `--${name} is a flag and takes no value (got '${inline}')`);
      }
      values[name] = negated ? false : inline !== 'false';
      continue;
    }
    const raw = inline ?? argv[++i];
    if (raw === undefined) throw usageError(spec.name, `--${name} needs a value`);
    // `--prompt --max-tokens 2`: the value was forgotten. Only the command's own options count,
    // so a value that merely starts with '-' ('-5 degrees', '-1') is still taken.
    if (inline === undefined && isOwnOption(spec, raw)) {
      throw usageError(
        spec.name,
        `--${name} needs a value, but the next argument is the option '${raw}'`,
        `give --${name} a value, or write --${name}=${raw} if you meant that text`,
      );
    }
    values[name] = convert(spec.name, name, opt, raw);
  }

  for (const [name, opt] of Object.entries(spec.options)) {
    if (values[name] !== undefined) continue;
    if (opt.default !== undefined) values[name] = Array.isArray(opt.default) ? [...opt.default] : opt.default;
    else if (opt.type === 'boolean') values[name] = false;
    else if (opt.required) throw usageError(spec.name, `--${name} is required`);
  }
  const declared = spec.positionals ?? [];
  const required = declared.filter((p) => p.required);
  if (positionals.length < required.length) {
    throw usageError(spec.name, `missing ${required.map((p) => p.name.toUpperCase()).join(' ')}`);
  }
  if (positionals.length > declared.length) {
    const extra = positionals
      .slice(declared.length)
      .map((p) => `'${p}'`)
      .join(' ');
    const takes =
      declared.length === 0
        ? 'takes no arguments'
        : `takes ${declared.map((p) => p.name.toUpperCase()).join(' ')} only`;
    throw usageError(
      spec.name,
      `unexpected argument ${extra} (${spec.name} ${takes})`,
      `quote a value that contains spaces, or run \`tandem ${spec.name} --help\` to see the options`,
    );
  }
  return { options: values as ParsedOptions<T>, positionals };
}

/** The `--help` text, generated from the option table. */
export function formatHelp(spec: CommandSpec): string {
  const pos = (spec.positionals ?? []).map((p) =>
    p.required ? p.name.toUpperCase() : `[${p.name.toUpperCase()}]`,
  );
  const lines = [
    `usage: tandem ${spec.name}${pos.length ? ' ' + pos.join(' ') : ''} [options]`,
    '',
    spec.summary,
  ];
  if (spec.description) lines.push('', spec.description);
  if (spec.positionals?.length) {
    lines.push('', 'arguments:');
    for (const p of spec.positionals) lines.push(`  ${p.name.toUpperCase().padEnd(28)} ${p.description}`);
  }
  lines.push('', 'options:');
  const entries: [string, OptionSpec][] = [
    ...Object.entries(spec.options),
    ['help', { type: 'boolean', description: 'show this help' }],
  ];
  for (const [name, opt] of entries) {
    const value = opt.type === 'boolean' ? '' : ` <${opt.placeholder ?? opt.choices?.join('|') ?? opt.type}>`;
    const flag = `${opt.short ? `-${opt.short}, ` : ''}--${name}${value}`;
    const extra =
      opt.default !== undefined ? ` (default: ${String(opt.default)})` : opt.required ? ' (required)' : '';
    lines.push(`  ${flag.padEnd(28)} ${opt.description}${extra}`);
  }
  if (spec.examples?.length) lines.push('', 'examples:', ...spec.examples.map((e) => `  ${e}`));
  return lines.join('\n') + '\n';
}
