/**
 * Every host told what it lacks. `krunbox doctor` on a PATH missing each host tool
 * names it with the exact install command; a create without bwrap is S302 naming the package.
 * (Issue 31.)
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { appArmorRestrictsUserns, installCommand, packageManager, REQUIREMENTS } from '../../lib/host-requirements.js'
import { requirementsReport } from '../../lib/cli/doctor.js'
import { asRoot, checkoutUnreachable } from '../helpers/rootless.js'
import { ensureCliBuilt, krunbox, privateCliEnv } from './helpers.js'

const { home, env } = privateCliEnv()
/** A PATH with nothing but node and the shell basics: every host tool is missing. */
const bareBin = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-barepath-'))

beforeAll(async () => {
  await ensureCliBuilt()
  for (const tool of ['sh', 'env']) fs.symlinkSync(`/bin/${tool}`, path.join(bareBin, tool))
  fs.symlinkSync(process.execPath, path.join(bareBin, 'node'))
}, 120_000)
afterAll(() => {
  fs.rmSync(home, { recursive: true, force: true })
  fs.rmSync(bareBin, { recursive: true, force: true })
})

describe('host requirements', () => {
  it('doctor on a PATH without the host tools names each one with the install command of this host', async () => {
    const r = await krunbox(['doctor'], { env: { ...env, PATH: bareBin } })
    expect(r.code).toBe(0)
    const manager = packageManager()
    expect(manager).toBe('apt') // this machine is Debian
    for (const req of REQUIREMENTS) {
      if (req.name.includes('keyring')) continue // a file, not on PATH: present here
      expect(r.stdout).toMatch(
        new RegExp(
          `${req.name.replace(/[()/]/g, '.')} +MISSING \\(.*\\): sudo apt-get install -y ${req.packages.apt}\\n`,
        ),
      )
    }
    expect(r.stdout).toContain('all missing at once: sudo apt-get install -y bubblewrap mmdebstrap zstd npm uidmap')
    // The presets not cached say why they cannot be built, not "built on first use".
    expect(r.stdout).not.toMatch(/not cached: built on first use/)
  })

  // One tool missing at a time, every other one present: the line names that one and its package.
  const ALL_TOOLS = ['bwrap', 'mmdebstrap', 'zstd', 'npm', 'newuidmap', 'newgidmap']
  for (const [tool, requirement, pkg] of [
    ['bwrap', 'bubblewrap (bwrap)', 'bubblewrap'],
    ['mmdebstrap', 'mmdebstrap', 'mmdebstrap'],
    ['zstd', 'zstd', 'zstd'],
    ['npm', 'npm', 'npm'],
    ['newuidmap', 'newuidmap/newgidmap', 'uidmap'],
  ] as const) {
    it(`doctor on a PATH missing only ${tool} names ${requirement} and apt-get install -y ${pkg}`, async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), `kb-no-${tool}-`))
      try {
        for (const name of fs.readdirSync(bareBin))
          fs.symlinkSync(fs.readlinkSync(path.join(bareBin, name)), path.join(dir, name))
        for (const other of ALL_TOOLS.filter((t) => t !== tool)) {
          const found = (process.env.PATH ?? '')
            .split(':')
            .map((d) => path.join(d, other))
            .find((p) => fs.existsSync(p))
          expect(found, `${other} on this host's PATH`).toBeDefined()
          fs.symlinkSync(found!, path.join(dir, other))
        }
        const noBwrapVariable: NodeJS.ProcessEnv = { ...env, PATH: dir }
        delete noBwrapVariable.KRUNBOX_BWRAP
        const r = await krunbox(['doctor'], { env: noBwrapVariable })
        expect(r.code).toBe(0)
        const missing = r.stdout.split('\n').filter((l) => / MISSING /.test(l))
        expect(missing).toHaveLength(1)
        expect(missing[0]).toMatch(
          new RegExp(`^ *${requirement.replace(/[()/]/g, '.')} +MISSING \\(.*\\): sudo apt-get install -y ${pkg}$`),
        )
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    })
  }

  it('doctor with every tool present says so', async () => {
    const r = await krunbox(['doctor'], { env })
    for (const req of REQUIREMENTS)
      expect(r.stdout).toMatch(new RegExp(`${req.name.replace(/[()/]/g, '.')} +present\\n`))
  })

  // Runs the checkout's CLI as nobody: needs root, and a checkout every user can reach.
  it.skipIf(!asRoot || checkoutUnreachable !== null)(
    'doctor for a user without subordinate ids names them with the usermod command, and the presets as not buildable',
    async () => {
      const { home, env: userEnv } = privateCliEnv()
      fs.chmodSync(home, 0o777)
      try {
        const r = await krunbox(`exec setpriv --reuid nobody --regid nogroup --clear-groups $CLI doctor`, {
          env: { ...userEnv, HOME: home, XDG_CACHE_HOME: path.join(home, 'cache') },
        })
        expect(r.code).toBe(0)
        expect(r.stdout).toMatch(
          /^ {2}subordinate ids +MISSING \(.*none for nobody in \/etc\/subuid and \/etc\/subgid\): sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 nobody$/m,
        )
        expect(r.stdout).toMatch(/^ {2}base +not cached: cannot be built here without subordinate ids/m)
      } finally {
        fs.rmSync(home, { recursive: true, force: true })
      }
      // root needs none.
      expect((await krunbox(['doctor'], { env })).stdout).toMatch(/^ {2}subordinate ids +not needed \(root\)$/m)
    },
  )

  it("Ubuntu's AppArmor restriction on user namespaces: read from its sysctl, and doctor gives a user who is not root its two fixes", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-apparmor-'))
    try {
      const sysctl = path.join(dir, 'apparmor_restrict_unprivileged_userns')
      fs.writeFileSync(sysctl, '1\n')
      expect(appArmorRestrictsUserns(sysctl)).toBe(true)
      fs.writeFileSync(sysctl, '0\n')
      expect(appArmorRestrictsUserns(sysctl)).toBe(false)
      expect(appArmorRestrictsUserns(path.join(dir, 'absent'))).toBe(false) // not Ubuntu: no such sysctl
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
    const restricted = requirementsReport({ appArmorRestrictsUserns: true, root: false })
    expect(restricted).toMatch(
      /restricted by AppArmor, so bwrap cannot make a sandbox for this user; the two known fixes:\n/,
    )
    expect(restricted).toContain('sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0')
    expect(restricted).toContain('profile bwrap /usr/bin/bwrap flags=(unconfined) { userns, }')
    expect(restricted).toContain('sudo apparmor_parser -r /etc/apparmor.d/bwrap')
    // Root makes user namespaces under any AppArmor policy; a host without the restriction needs no fix.
    expect(requirementsReport({ appArmorRestrictsUserns: true, root: true })).not.toMatch(/AppArmor/)
    expect(requirementsReport({ appArmorRestrictsUserns: false, root: false })).not.toMatch(/AppArmor/)
  })

  it('knows the package manager of Debian, Ubuntu, Fedora and Arch, and the command of each', () => {
    expect(packageManager({ ID: 'ubuntu', ID_LIKE: 'debian' })).toBe('apt')
    expect(packageManager({ ID: 'fedora' })).toBe('dnf')
    expect(packageManager({ ID: 'rocky', ID_LIKE: 'rhel centos fedora' })).toBe('dnf')
    expect(packageManager({ ID: 'arch' })).toBe('pacman')
    expect(packageManager({ ID: 'alpine' })).toBeNull()
    expect(installCommand('dnf', ['bubblewrap'])).toBe('sudo dnf install -y bubblewrap')
    expect(installCommand('pacman', ['zstd'])).toBe('sudo pacman -S --needed zstd')
  })

  it('run without bwrap is S302 naming apt-get install bubblewrap, not "the project setup"', async () => {
    const r = await krunbox(['run', 'base', '--', 'true'], { env: { ...env, PATH: bareBin } })
    expect(r.code).toBe(125)
    expect(r.stderr).toContain('S302')
    expect(r.stderr).toContain('sudo apt-get install -y bubblewrap')
    expect(r.stderr).not.toContain('project setup')
  })
})
