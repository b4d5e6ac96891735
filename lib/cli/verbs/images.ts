/**
 * `krunbox images [ls | pull | import | build | rm | prune]`: the image cache.
 */
import { getDefaultRuntime, runtimeState } from '../../runtime.js'
import { ProgressPrinter } from '../progress.js'
import { parse, need, type VerbArgs } from '../args.js'
import { errors } from '../../protocol/errors.gen.js'

export async function images({ head }: VerbArgs): Promise<number> {
  const [sub = 'list', ...rest] = head
  const runtime = getDefaultRuntime()
  const store = runtime.images
  switch (sub) {
    case 'ls':
    case 'list': {
      parse(rest, {}, 0)
      process.stdout.write(['NAME', 'ID', 'SIZE', 'BUILT'].join('\t') + '\n')
      for (const i of await store.list())
        process.stdout.write(
          [
            i.name,
            i.id.slice(0, 12),
            `${(i.sizeBytes / 1048576).toFixed(1)}MiB`,
            new Date(i.builtAt).toISOString(),
          ].join('\t') + '\n',
        )
      return 0
    }
    case 'build': {
      // Without a name: every preset the cache holds (the others are built on first use).
      const { values, positionals } = parse(rest, { force: { type: 'boolean' } }, 1)
      const names =
        positionals.length > 0 ? positionals : (await store.list()).filter((i) => i.preset).map((i) => i.name)
      if (names.length === 0)
        process.stderr.write(
          'krunbox: no preset is built yet; presets are built on first use or by images build <name>\n',
        )
      for (const name of names) {
        const progress = new ProgressPrinter(process.stderr)
        const image = await store.build(name, { force: values.force === true, onProgress: (p) => progress.update(p) })
        progress.done()
        process.stdout.write(
          positionals.length > 0 ? `${image.id}\n` : `${name}\t${image.id}\t${image.built ? 'built' : 'current'}\n`,
        )
      }
      return 0
    }
    case 'pull': {
      const { values, positionals } = parse(rest, { always: { type: 'boolean' } }, 1)
      const ref = need(positionals[0], '<ref>')
      const progress = new ProgressPrinter(process.stderr)
      const image = await store.pull(ref, {
        policy: values.always ? 'always' : 'if-missing',
        onProgress: (p) => progress.update(p),
      })
      progress.done()
      process.stdout.write(`${image.id}\n`)
      return 0
    }
    case 'import': {
      const { positionals } = parse(rest, {}, 2)
      const source = need(positionals[0], '<path>')
      const name = need(positionals[1], '<name>')
      const progress = new ProgressPrinter(process.stderr)
      const image = await store.import(source, { name, onProgress: (p) => progress.update(p) })
      progress.done()
      process.stdout.write(`${image.id}\n`)
      return 0
    }
    case 'rm': {
      const name = need(parse(rest, {}, 1).positionals[0], '<name>')
      if (!(await store.remove(name))) process.stderr.write(`krunbox: image ${name} was not built; nothing to remove\n`)
      return 0
    }
    case 'prune': {
      parse(rest, {}, 0)
      // Images of live sandboxes stay, even when their name now points to a newer build.
      const inUse = runtimeState(runtime)
        .ids()
        .map((id) => runtimeState(runtime).read(id)?.imageVersion ?? '')
      for (const id of await store.prune({ keep: inUse.filter(Boolean) })) process.stdout.write(`${id}\n`)
      return 0
    }
    default:
      throw errors.badArgument({
        subject: `images subcommand ${JSON.stringify(sub)}`,
        problem: 'is unknown: use ls, pull, import, build, rm or prune',
      })
  }
}
