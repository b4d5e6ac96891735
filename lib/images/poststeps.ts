/**
 * What happens to a tree mmdebstrap made before it becomes an image: trims, the files and
 * directories a sandbox expects, busybox applet links, Node from the npm registry; for an
 * extracted tree (base) what no maintainer script made (the CA bundle), for a Debian tree the
 * sandbox user, apt's configuration and the build's leftovers.
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import { parseDebFileName, parseFetchedReleases } from './archive.js'
import { APT_CONFIG_FILE, aptConfig, MMDEBSTRAP_CONFIG_FILES } from './debian-config.js'
import { installedPackages } from './dpkg-status.js'
import { DEBS_RECORD, RELEASES_RECORD } from './mmdebstrap.js'
import { resolveInRoot } from './rootfs.js'
import { findExecutable } from '../paths.js'
import { run } from './run.js'
import type { ReleaseFile, ResolvedPackage } from './types.js'
import { errors } from '../protocol/errors.gen.js'

/**
 * Reads and deletes what the build's hooks recorded: the Release files apt fetched, and the
 * packages (the .deb files unpacked for an extracted tree, dpkg's database for a Debian one).
 */
export async function takeBuildRecords(
  root: string,
  variant: 'extract' | 'apt',
): Promise<{ packages: ResolvedPackage[]; fetched: ReleaseFile[] }> {
  const debs = await fs.readFile(path.join(root, DEBS_RECORD), 'utf8').catch(() => '')
  const releases = await fs.readFile(path.join(root, RELEASES_RECORD), 'utf8').catch(() => '')
  await fs.rm(path.join(root, DEBS_RECORD), { force: true })
  await fs.rm(path.join(root, RELEASES_RECORD), { force: true })
  const packages =
    variant === 'apt'
      ? await installedPackages(root)
      : debs
          .split('\n')
          .map((f) => parseDebFileName(f.trim()))
          .filter((p): p is ResolvedPackage => p !== null)
          .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  return { packages, fetched: parseFetchedReleases(releases) }
}

/**
 * Applies trim patterns: "a/b" removes a/b; "a/*" removes every entry of a; "!name" after
 * the last segment keeps entries called name. Symlinked directories are not followed.
 */
export async function applyTrims(root: string, trims: readonly string[]): Promise<void> {
  for (const trim of trims) {
    const [pattern, keep] = trim.split('!')
    await trimSegments(root, pattern.split('/'), keep)
  }
}

async function trimSegments(dir: string, segments: string[], keep: string | undefined): Promise<void> {
  const [head, ...rest] = segments
  const names = head === '*' ? await fs.readdir(dir).catch(() => [] as string[]) : [head]
  for (const name of names) {
    const abs = path.join(dir, name)
    if (rest.length === 0) {
      if (keep !== undefined && name === keep) continue
      await fs.rm(abs, { recursive: true, force: true })
      continue
    }
    const stat = await fs.lstat(abs).catch(() => null)
    if (stat?.isDirectory()) await trimSegments(abs, rest, keep)
  }
}

/** `sandbox` (uid 1000) is the unprivileged user commands can run as; its home is the workspace. */
const SANDBOX_USER = 'sandbox:x:1000:1000:sandbox:/workspace:/bin/sh\n'
const SANDBOX_GROUP = 'sandbox:x:1000:\n'

/** Written where no package wrote them (a Debian tree has its own passwd, group and nsswitch.conf). */
const SYSTEM_FILES: Record<string, string> = {
  'etc/passwd': `root:x:0:0:root:/root:/bin/sh\n${SANDBOX_USER}nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n`,
  'etc/group': `root:x:0:\n${SANDBOX_GROUP}nogroup:x:65534:\n`,
  'etc/nsswitch.conf':
    'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\nethers: files\nrpc: files\n',
}

/** Directories and their modes. proc, sys and dev are empty mount points. */
const SYSTEM_DIRS: Array<[string, number]> = [
  ['etc', 0o755],
  ['root', 0o700],
  ['tmp', 0o1777],
  ['var/tmp', 0o1777],
  ['workspace', 0o777],
  ['proc', 0o755],
  ['sys', 0o755],
  ['dev', 0o755],
  ['run', 0o755],
  ['home', 0o755],
]

/**
 * The files and directories a sandbox expects. Host files mmdebstrap copied in
 * (resolv.conf, hostname, hosts, fstab) are replaced, and /dev is emptied: sandboxes get their own.
 */
export async function addSystemFiles(root: string): Promise<void> {
  await fs.rm(path.join(root, 'dev'), { recursive: true, force: true })
  for (const [dir, mode] of SYSTEM_DIRS) {
    const abs = await resolveInRoot(root, `/${dir}`)
    await fs.mkdir(abs, { recursive: true })
    await fs.chmod(abs, mode)
  }
  for (const [file, content] of Object.entries(SYSTEM_FILES)) {
    const abs = await resolveInRoot(root, `/${file}`)
    const exists = await fs.lstat(abs).then(
      () => true,
      () => false,
    )
    if (!exists) await fs.writeFile(abs, content, { mode: 0o644 })
  }
  await fs.rm(path.join(root, 'etc/fstab'), { force: true })
  await fs.writeFile(path.join(root, 'etc/hostname'), 'krunbox\n', { mode: 0o644 })
  await fs.writeFile(
    path.join(root, 'etc/hosts'),
    '127.0.0.1\tlocalhost krunbox\n::1\tlocalhost ip6-localhost ip6-loopback\n',
    {
      mode: 0o644,
    },
  )
  // Empty: the sandbox engine provides name resolution when it enables networking.
  await fs.writeFile(path.join(root, 'etc/resolv.conf'), '', { mode: 0o644 })
}

/**
 * What update-ca-certificates would have written: every certificate shipped under
 * /usr/share/ca-certificates, concatenated into /etc/ssl/certs/ca-certificates.crt.
 * Returns the number of certificates (0 when the package is absent).
 */
export async function writeCaBundle(root: string): Promise<number> {
  const shared = path.join(root, 'usr/share/ca-certificates')
  const entries = await fs.readdir(shared, { recursive: true }).catch(() => [] as string[])
  const certs = entries.filter((e) => e.endsWith('.crt')).sort()
  if (certs.length === 0) return 0
  const pems = await Promise.all(certs.map((c) => fs.readFile(path.join(shared, c), 'utf8')))
  const bundle = await resolveInRoot(root, '/etc/ssl/certs/ca-certificates.crt')
  await fs.mkdir(path.dirname(bundle), { recursive: true })
  await fs.writeFile(bundle, pems.map((p) => (p.endsWith('\n') ? p : `${p}\n`)).join(''), { mode: 0o644 })
  return certs.length
}

/** Applets that would pose as tools they are not (a fake dpkg or rpm) or make no sense here. */
const SKIPPED_APPLETS = new Set(['linuxrc', 'dpkg', 'dpkg-deb', 'rpm', 'rpm2cpio'])

/** Links every busybox applet that no package provides (/bin/sh, echo, grep, ...) to busybox. */
export async function linkBusyboxApplets(root: string): Promise<number> {
  const busybox = path.join(root, 'usr/bin/busybox')
  if (
    !(await fs.stat(busybox).then(
      (s) => s.isFile(),
      () => false,
    ))
  )
    return 0
  let linked = 0
  for (const entry of await listApplets(busybox)) {
    const name = path.basename(entry)
    if (SKIPPED_APPLETS.has(name) || !entry.includes('/')) continue
    const link = await resolveInRoot(root, `/${entry}`, false)
    if (
      await fs.lstat(link).then(
        () => true,
        () => false,
      )
    )
      continue
    await fs.mkdir(path.dirname(link), { recursive: true })
    await fs.symlink(path.relative(path.dirname(link), busybox), link)
    linked += 1
  }
  return linked
}

/** `busybox --list-full`: applet paths such as "bin/sh" and "usr/bin/awk". */
async function listApplets(busybox: string): Promise<string[]> {
  const lines: string[] = []
  // busybox-static runs on the host as it is (same architecture, no libraries).
  const result = await run(busybox, ['--list-full'], { onLine: (l) => l.trim() !== '' && lines.push(l.trim()) })
  if (result.code !== 0)
    throw errors.imageBuildFailed({ subject: 'busybox --list-full', problem: `failed:\n${result.tail}` })
  return lines
}

/**
 * Runs argv inside the tree (bubblewrap, the tree as its root, writable; no network, a clean
 * environment): the image's own programs on the image's own files. Fails the build with the
 * program's output tail.
 */
export async function runInTree(root: string, argv: string[], what: string): Promise<void> {
  const bwrap = findExecutable('bwrap')
  if (bwrap === null)
    throw errors.imageBuildFailed({
      subject: 'bubblewrap (bwrap)',
      problem: `is needed for ${what}: apt-get install bubblewrap`,
    })
  const result = await run(
    bwrap,
    [
      '--unshare-all',
      '--die-with-parent',
      '--bind',
      root,
      '/',
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--tmpfs',
      '/tmp',
      '--clearenv',
      '--setenv',
      'PATH',
      '/usr/sbin:/usr/bin:/sbin:/bin',
      '--setenv',
      'HOME',
      '/root',
      '--setenv',
      'LANG',
      'C.UTF-8',
      ...argv,
    ],
    { dieWithParent: true },
  )
  if (result.code !== 0)
    throw errors.imageBuildFailed({
      subject: what,
      problem: `failed (exit ${result.code ?? result.signal}):\n${result.tail}`,
    })
}

/**
 * A Debian tree's last touches: the sandbox user beside Debian's own, apt's configuration for
 * sandboxes (debian-config.ts), mmdebstrap's build-only options removed, and apt's download
 * directories given to root (they belong to _apt, whom apt no longer switches to).
 */
export async function finishDebianTree(root: string): Promise<void> {
  for (const [file, line] of [
    ['etc/passwd', SANDBOX_USER],
    ['etc/group', SANDBOX_GROUP],
  ]) {
    const abs = await resolveInRoot(root, `/${file}`)
    const text = await fs.readFile(abs, 'utf8').catch(() => '')
    if (!text.split('\n').some((l) => l.startsWith('sandbox:')))
      await fs.writeFile(abs, `${text}${text === '' || text.endsWith('\n') ? '' : '\n'}${line}`, { mode: 0o644 })
  }
  await fs.writeFile(await resolveInRoot(root, `/${APT_CONFIG_FILE}`), aptConfig(), { mode: 0o644 })
  for (const file of MMDEBSTRAP_CONFIG_FILES) await fs.rm(await resolveInRoot(root, `/${file}`), { force: true })
  for (const dir of ['var/lib/apt/lists/partial', 'var/cache/apt/archives/partial']) {
    const abs = await resolveInRoot(root, `/${dir}`)
    await fs.mkdir(abs, { recursive: true, mode: 0o700 })
    await fs.lchown(abs, process.getuid?.() ?? 0, process.getgid?.() ?? 0)
  }
  // apt gives its terminal log to group adm at every run; without CAP_CHOWN only a log that
  // already is root:adm passes (a chown to the group a file has needs no capability).
  const log = await resolveInRoot(root, '/var/log/apt/term.log')
  await fs.mkdir(path.dirname(log), { recursive: true })
  await fs.writeFile(log, '', { mode: 0o640 })
  const adm = /^adm:[^:]*:(\d+):/m.exec(await fs.readFile(await resolveInRoot(root, '/etc/group'), 'utf8'))
  if (process.getuid?.() === 0 && adm !== null) await fs.lchown(log, 0, Number(adm[1]))
}

/**
 * Lays out Node as its official tarball does, under /usr/local: the binary from its npm package
 * (`bin/node`), and npm's own package (self-contained: its dependencies are bundled) at
 * lib/node_modules/npm with the npm and npx commands linked into bin.
 */
export async function installNode(root: string, nodeDir: string, npmDir: string | null): Promise<void> {
  const bin = await resolveInRoot(root, '/usr/local/bin')
  await fs.mkdir(bin, { recursive: true })
  const node = path.join(bin, 'node')
  await fs.copyFile(path.join(nodeDir, 'bin', 'node'), node)
  await fs.chmod(node, 0o755)
  if (npmDir === null) return
  const modules = await resolveInRoot(root, '/usr/local/lib/node_modules')
  await fs.mkdir(modules, { recursive: true })
  await fs.rename(npmDir, path.join(modules, 'npm'))
  for (const [command, script] of [
    ['npm', 'npm-cli.js'],
    ['npx', 'npx-cli.js'],
  ]) {
    await fs.rm(path.join(bin, command), { force: true })
    await fs.symlink(`../lib/node_modules/npm/bin/${script}`, path.join(bin, command))
  }
}
