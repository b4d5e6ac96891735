/** Runs once before any test file: the CLI tests need dist/ built from the current sources. */
import { ensureCliBuilt } from './cli/helpers.js'

export default async function setup(): Promise<void> {
  await ensureCliBuilt()
}
