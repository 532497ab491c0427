import { TandemError, exitCodeFor, isTandemError } from '../errors/index.js';
import { formatHelp, parseArgs } from './options.js';
import { commands, type CommandEntry } from './registry.js';
import { overview } from './commands/help.js';

function findCommand(argv: readonly string[]): { entry: CommandEntry; rest: readonly string[] } | undefined {
  for (const words of [2, 1]) {
    const name = argv.slice(0, words).join(' ');
    const entry = commands.find((c) => c.name === name);
    if (entry) return { entry, rest: argv.slice(words) };
  }
  return undefined;
}

/** Runs one command line; returns the process exit code. Errors are printed, never thrown. */
export async function main(argv: readonly string[]): Promise<number> {
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h') {
    process.stdout.write(overview());
    return 0;
  }
  if (argv[0] === '--version') {
    const pkg = (await import('../../package.json', { with: { type: 'json' } })).default;
    process.stdout.write(`tandem ${pkg.version}\n`);
    return 0;
  }
  // `tandem help run` is `tandem run --help` (an unknown name gets the unknown-command error)
  if (argv[0] === 'help' && argv.length > 1 && !(argv[1] as string).startsWith('-'))
    return main(findCommand(argv.slice(1)) ? [...argv.slice(1), '--help'] : argv.slice(1));
  const json = argv.includes('--json');
  try {
    const found = findCommand(argv);
    if (!found) {
      const group = commands.filter((c) => c.name.startsWith(`${argv[0]} `)).map((c) => c.name);
      // `tandem bench` and `tandem bench --help` list the group's commands.
      if (group.length && (argv.length === 1 || argv[1] === '--help' || argv[1] === '-h')) {
        process.stdout.write(overview(argv[0]));
        return 0;
      }
      throw new TandemError('CLI_UNKNOWN_COMMAND', `unknown command '${argv.slice(0, 2).join(' ')}'`, {
        hint: group.length
          ? `did you mean one of: ${group.join(', ')}?`
          : 'run `tandem --help` to list the commands',
      });
    }
    const spec = await found.entry.load();
    if (found.rest.includes('--help') || found.rest.includes('-h')) {
      process.stdout.write(formatHelp(spec));
      return 0;
    }
    const code = await spec.run(parseArgs(spec, found.rest));
    return code ?? 0;
  } catch (error) {
    return report(error, json);
  }
}

export function report(error: unknown, json: boolean): number {
  if (isTandemError(error)) {
    if (json) process.stderr.write(JSON.stringify({ error: error.toJSON() }) + '\n');
    else process.stderr.write(`error [${error.code}]: ${error.message}\n  hint: ${error.hint}\n`);
    return exitCodeFor(error.category);
  }
  const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
  process.stderr.write(`internal error (a bug in tandem; please report it):\n${text}\n`);
  return exitCodeFor('internal');
}
