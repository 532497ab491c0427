export { main, report } from './main.js';
export {
  defineCommand,
  parseArgs,
  formatHelp,
  type CommandSpec,
  type OptionTable,
  type ParsedArgs,
} from './options.js';
