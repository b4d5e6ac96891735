/**
 * Running a program in a user namespace mapped like the sandbox of a rootless host user with
 * subordinate ids (drivers/subids.ts: 0 is the user, 1.. its ranges). An image unpacked there
 * keeps its owners (a file of uid 1000 is the user's 1000th subordinate id, uid 1000 in the
 * sandbox); the user cannot list or delete such a tree from outside, so removal runs there too.
 *
 * `unshare --user` makes the namespace; the program waits on stdin until newuidmap and
 * newgidmap have written its maps, then is exec'd as the namespace's root (an exec before the
 * maps exist would drop every capability).
 */
import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process'
import { findExecutable } from '../../paths.js'
import { subordinateIdMapping, type SubordinateMapping } from '../../drivers/subids.js'

/** How many ids from 0 a map text ("inside outside count" lines) covers. */
export function mappedIdCount(map: string): number {
  return map
    .trim()
    .split('\n')
    .reduce((sum, line) => sum + Number(line.trim().split(/\s+/)[2] ?? 0), 0)
}

/** The mapping a rootless unpack uses, or null (root host, no ranges, no helpers, no unshare). */
export async function unpackMapping(): Promise<SubordinateMapping | null> {
  if (process.getuid?.() === 0 || findExecutable('unshare', `${process.env.PATH ?? ''}:/usr/bin:/bin`) === null)
    return null
  return subordinateIdMapping()
}

function runHelper(helper: string, pid: number, map: string): Promise<void> {
  const args = [String(pid), ...map.trim().split(/\s+/)]
  return new Promise((resolve, reject) => {
    const child = spawn(helper, args, { stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()).length > 4096 && (stderr = stderr.slice(-4096)))
    child.on('error', reject)
    child.on('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`${helper} ${args.join(' ')} failed (exit ${code}): ${stderr.trim()}`)),
    )
  })
}

/**
 * Starts `command args` as root of a new user namespace mapped by `mapping`. stdin is taken
 * for the start signal and closed after it; `stdio` gives the rest (fd 1, 2, and 'ipc').
 */
export async function spawnMapped(
  mapping: SubordinateMapping,
  command: string,
  args: string[],
  stdio: StdioOptions = ['pipe', 'ignore', 'pipe'],
): Promise<ChildProcess> {
  const unshare = findExecutable('unshare', `${process.env.PATH ?? ''}:/usr/bin:/bin`) as string
  // The maps can only be written once unshare has made the namespace, which 'spawn' does not
  // mean: the shell says so on a descriptor of its own, closed before the program runs.
  const rest = (stdio as unknown[]).slice(1)
  const readyFd = 1 + rest.length
  const script = `echo >&${readyFd}; exec ${readyFd}>&-; read go && exec "$0" "$@"`
  const child = spawn(unshare, ['--user', '--', '/bin/sh', '-c', script, command, ...args], {
    stdio: ['pipe', ...rest, 'pipe'] as StdioOptions,
  })
  const ready = new Promise<void>((resolve, reject) => {
    const channel = child.stdio[readyFd] as NodeJS.ReadableStream
    channel.once('data', () => resolve())
    channel.once('end', () => reject(new Error(`unshare --user ended before its namespace was made`)))
    child.once('error', reject)
  })
  try {
    await ready
    await runHelper(mapping.helpers.uid, child.pid as number, mapping.uidMap)
    await runHelper(mapping.helpers.gid, child.pid as number, mapping.gidMap)
  } catch (err) {
    child.kill('SIGKILL')
    throw err
  }
  ;(child.stdio[readyFd] as NodeJS.ReadableStream).resume()
  child.stdin?.on('error', () => undefined)
  child.stdin?.end('go\n')
  return child
}

/** Deletes a tree that may hold files of the user's subordinate ids. */
export async function removeTreeMapped(mapping: SubordinateMapping, dir: string): Promise<void> {
  const child = await spawnMapped(mapping, 'rm', ['-rf', '--', dir])
  let stderr = ''
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()).length > 4096 && (stderr = stderr.slice(-4096)))
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve))
  if (code !== 0)
    throw new Error(`rm -rf ${dir} in the subordinate ids' namespace failed (exit ${code}): ${stderr.trim()}`)
}
