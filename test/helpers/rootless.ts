/**
 * Runs a fixture as the unprivileged user nobody, from a root test process (setpriv), with a
 * work directory and a copy of the base image that nobody owns.
 */
import { execFile, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { ImageStore } from '../../lib/images/index.js'

export const NOBODY = 65534
export const asRoot = process.getuid?.() === 0

/**
 * Why tests that run the checkout's code as another uid cannot run here, or null. Those are
 * nobody (the rootless tests) and, on a root host, the sandbox id range the krun shim runs as
 * (the libkrun double and its guest live in the checkout). They need every directory on the way
 * to the checkout searchable by other users, which a clone under mktemp -d or /root is not.
 */
export const checkoutUnreachable: string | null = (() => {
  const root = path.resolve(import.meta.dirname, '..', '..')
  for (let dir = root; ; dir = path.dirname(dir)) {
    if ((fs.statSync(dir).mode & 0o001) === 0)
      return `${dir} is not searchable by other users (mode ${(fs.statSync(dir).mode & 0o777).toString(8)})`
    if (dir === '/') return null
  }
})()

/**
 * Runs test/fixtures/<fixture> as nobody (argv: work, image, ...extra), with `groups` as its
 * supplementary groups if given; returns its last stdout line as JSON.
 */
export async function asNobody(
  fixture: string,
  extra: (work: string) => string[] = () => [],
  options: { groups?: number[] } = {},
): Promise<{ work: string; result: any; cleanup(): void }> {
  const base = await new ImageStore().resolve('base')
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-rootless-'))
  const cleanup = () => fs.rmSync(work, { recursive: true, force: true })
  try {
    fs.chmodSync(work, 0o755)
    const image = path.join(work, 'image')
    execFileSync('cp', ['-a', base.rootfs, image])
    execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, work])
    const out = execFileSync(
      'setpriv',
      [
        '--reuid',
        String(NOBODY),
        '--regid',
        String(NOBODY),
        ...(options.groups ? ['--groups', options.groups.join(',')] : ['--clear-groups']),
        process.execPath,
        '--import',
        'tsx',
        path.resolve('test/fixtures', fixture),
        work,
        image,
        ...extra(work),
      ],
      { env: { ...process.env, HOME: work }, timeout: 120_000, encoding: 'utf8' },
    )
    return { work, result: JSON.parse(out.trim().split('\n').pop()!), cleanup }
  } catch (err) {
    cleanup()
    throw err
  }
}

/** Runs `node -e script ...args` as nobody with no supplementary groups (setpriv); its stdout. */
export async function nodeAsNobody(script: string, args: string[] = []): Promise<string> {
  return nodeAsUser(NOBODY, script, args)
}

/** nodeAsNobody for another uid (its gid the same number). */
export async function nodeAsUser(uid: number, script: string, args: string[] = []): Promise<string> {
  const user = ['--reuid', String(uid), '--regid', String(uid), '--clear-groups']
  const { stdout } = await promisify(execFile)('setpriv', [...user, process.execPath, '-e', script, ...args])
  return stdout
}
