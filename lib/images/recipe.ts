/**
 * Canonical recipes and image ids. An id is the sha256 of the canonical JSON of the recipe
 * (preset, variant, packages, Recommends, suite, trims, post-steps version, Node major, local
 * .deb files and recipe files by content)
 * together with the state of its sources: the digests of the archive's InRelease files the
 * build fetched and the npm packages it pinned (see sourceState).
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import { summarizeTree } from './digest.js'
import { DEBIAN_TRIMS, EXTRACT_TRIMS, POST_STEPS_VERSION, PRESETS, isPresetName } from './presets.js'
import type { PresetDefinition } from './presets.js'
import { tslabRecipe } from './tslab.js'
import type { BuildRecipe, ImageRecipe, RecipeFile } from './types.js'
import { describe, optionalBoolean } from '../options.js'
import { errors } from '../protocol/errors.gen.js'

/** JSON with object keys sorted, so equal values always serialize alike. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`
  }
  return JSON.stringify(value)
}

export function sha256Hex(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex')
}

export function recipeDigest(recipe: BuildRecipe): string {
  return sha256Hex(canonicalJson(recipe))
}

/** What an id takes from outside the recipe. */
export interface SourceState {
  /** sha256 of each InRelease file, sorted: the same archive state from any mirror gives the same id. */
  releases: string[]
  npm: Array<{ name: string; version: string; integrity: string }>
  /** For a recipe built as a layer: the id of the preset it lies over. */
  over?: string
}

export function sourceState(
  releases: ReadonlyArray<{ sha256: string }>,
  npm: ReadonlyArray<{ name: string; version: string; integrity: string }>,
): SourceState {
  return {
    releases: releases.map((r) => r.sha256).sort(),
    npm: npm
      .map(({ name, version, integrity }) => ({ name, version, integrity }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
  }
}

export function imageId(recipe: BuildRecipe, state: SourceState | string): string {
  return sha256Hex(canonicalJson({ recipe, sources: state }))
}

export function presetRecipe(name: string, suite: string): BuildRecipe {
  if (!isPresetName(name))
    throw errors.imageUnknown({
      subject: `preset image "${name}"`,
      problem: `is unknown; presets are ${Object.keys(PRESETS).join(', ')}`,
    })
  const preset: PresetDefinition = PRESETS[name]
  const debian = preset.system === 'debian'
  return {
    kind: 'preset',
    preset: name,
    suite,
    variant: debian ? 'apt' : 'extract',
    packages: [...preset.packages].sort(),
    recommends: false,
    debs: [],
    trims: [...(debian ? DEBIAN_TRIMS : EXTRACT_TRIMS)],
    pythonVenv: preset.pythonVenv,
    postStepsVersion: POST_STEPS_VERSION,
    node: preset.node === null ? null : { ...preset.node },
    ...(preset.tslab === true && { tslab: tslabRecipe() }),
    files: [],
  }
}

/** Debian package names (policy §5.6.1), optionally with an architecture qualifier. */
const PACKAGE_NAME = /^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$/
/** Debian's longest names are about 70 characters; anything far longer is not one. */
const PACKAGE_NAME_MAX = 200

function validateRecipeFile(file: unknown, index: number): RecipeFile {
  const where = `recipe.files[${index}]`
  if (file === null || typeof file !== 'object')
    throw errors.badArgument({
      subject: `${where}`,
      problem: `must be an object { from, to, mode? }, got ${describe(file)}`,
    })
  const { from, to, mode } = file as Record<string, unknown>
  if (typeof from !== 'string' || from === '')
    throw errors.badArgument({ subject: `${where}.from`, problem: `must be a host path, got ${describe(from)}` })
  if (
    typeof to !== 'string' ||
    !to.startsWith('/') ||
    to.split('/').includes('..') ||
    path.posix.normalize(to) === '/'
  ) {
    throw errors.badArgument({
      subject: `${where}.to`,
      problem: `must be an absolute path inside the image without "..", got ${describe(to)}`,
    })
  }
  if (mode !== undefined && (!Number.isInteger(mode) || (mode as number) < 0 || (mode as number) > 0o7777)) {
    throw errors.badArgument({
      subject: `${where}.mode`,
      problem: `must be an integer permission mode 0..0o7777, got ${describe(mode)}`,
    })
  }
  return { from, to: path.posix.normalize(to), mode: mode as number | undefined }
}

/** Checks a user recipe's shape; host files are checked by customRecipe. */
export function validateRecipe(recipe: ImageRecipe): ImageRecipe {
  if (typeof recipe.base !== 'string' || !isPresetName(recipe.base)) {
    throw errors.imageUnknown({
      subject: `recipe base ${describe(recipe.base)}`,
      problem: `is not a preset; use one of ${Object.keys(PRESETS).join(', ')}`,
    })
  }
  const packages = recipe.packages ?? []
  if (!Array.isArray(packages))
    throw errors.badArgument({
      subject: 'recipe.packages',
      problem: `must be an array of Debian package names, got ${describe(packages)}`,
    })
  for (const p of packages) {
    if (typeof p !== 'string' || p.length > PACKAGE_NAME_MAX || !PACKAGE_NAME.test(p))
      throw errors.badArgument({
        subject: `recipe.packages: ${describe(p)}`,
        problem: `is not a Debian package name (a-z 0-9 + . -, at most ${PACKAGE_NAME_MAX} characters)`,
      })
  }
  const files = recipe.files ?? []
  if (!Array.isArray(files))
    throw errors.badArgument({ subject: 'recipe.files', problem: `must be an array, got ${describe(files)}` })
  const extraKeys = Object.keys(recipe).filter((k) => !RECIPE_KEYS.includes(k))
  if (extraKeys.length > 0)
    throw errors.badArgument({ subject: `recipe field(s) ${extraKeys.join(', ')}`, problem: 'are unknown' })
  const recommends = optionalBoolean(recipe.recommends, 'recipe.recommends', false)
  const debs = validateDebs(recipe.debs)
  if (debs.length > 0 && PRESETS[recipe.base].system !== 'debian')
    throw errors.badArgument({
      subject: `recipe.debs on base "${recipe.base}"`,
      problem: `need a Debian preset (${debianPresets().join(', ')}): ${recipe.base} has no dpkg or apt`,
    })
  return {
    base: recipe.base,
    packages: [...packages],
    ...(recommends && { recommends }),
    ...(debs.length > 0 && { debs }),
    files: files.map(validateRecipeFile),
  }
}

const RECIPE_KEYS = ['base', 'packages', 'recommends', 'debs', 'files']

function debianPresets(): string[] {
  return Object.values(PRESETS as Record<string, PresetDefinition>)
    .filter((p) => p.system === 'debian')
    .map((p) => p.name)
}

function validateDebs(debs: unknown): string[] {
  if (debs === undefined) return []
  if (!Array.isArray(debs))
    throw errors.badArgument({
      subject: 'recipe.debs',
      problem: `must be an array of .deb paths, got ${describe(debs)}`,
    })
  for (const deb of debs)
    if (typeof deb !== 'string' || !deb.endsWith('.deb'))
      throw errors.badArgument({ subject: `recipe.debs: ${describe(deb)}`, problem: 'is not a path to a .deb file' })
  return debs.map((deb: string) => path.resolve(deb))
}

/** A host file or directory of a recipe, by content: missing is S104, unreadable S106. */
async function contentDigest(subject: string, file: string, kinds: 'file' | 'file or directory'): Promise<string> {
  const stat = await fs.stat(file).catch((err: NodeJS.ErrnoException) => err)
  if (stat instanceof Error) {
    if (stat.code === 'ENOENT' || stat.code === 'ENOTDIR')
      throw errors.imageSourceMissing({ source: `${subject} ${file}` })
    throw errors.imageSourceUnreadable(
      { subject: `${subject} ${file}`, problem: `is unreadable: ${stat.code}` },
      { cause: stat },
    )
  }
  if (!stat.isFile() && (kinds === 'file' || !stat.isDirectory()))
    throw errors.badArgument({ subject: `${subject} ${file}`, problem: `is not a ${kinds}` })
  const digest = await summarizeTree(file).catch((err: NodeJS.ErrnoException) => {
    throw errors.imageSourceUnreadable(
      { subject: `${subject} ${file}`, problem: `is unreadable: ${err.code ?? err.message}` },
      { cause: err },
    )
  })
  return digest.digest
}

/** The build recipe of a custom recipe image: the base preset plus packages, local .debs and files by content. */
export async function customRecipe(recipe: ImageRecipe, suite: string): Promise<BuildRecipe> {
  const valid = validateRecipe(recipe)
  const base = presetRecipe(valid.base, suite)
  const files: BuildRecipe['files'] = []
  for (const file of valid.files ?? [])
    files.push({
      to: file.to,
      mode: file.mode ?? null,
      digest: await contentDigest('recipe file', file.from, 'file or directory'),
    })
  const debs: BuildRecipe['debs'] = []
  for (const deb of valid.debs ?? [])
    debs.push({ name: path.basename(deb), digest: await contentDigest('recipe .deb', deb, 'file') })
  return {
    ...base,
    kind: 'recipe',
    packages: [...new Set([...base.packages, ...(valid.packages ?? [])])].sort(),
    recommends: valid.recommends ?? false,
    debs,
    files,
  }
}
