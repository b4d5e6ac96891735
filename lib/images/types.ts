/** Shapes shared by the image modules. */
import type { OciImageConfig } from './oci/config.js'

export type ProgressStage = 'resolve' | 'download' | 'extract' | 'trim' | 'compile' | 'finalize'

export interface ProgressEvent {
  stage: ProgressStage
  /** Overall percent of the build, 0–100, never decreasing within one build. */
  percent: number
  /** For OCI pulls: the layer this event is about, with its bytes so far (downloaded or unpacked). */
  layer?: { digest: string; index: number; count: number; bytes: number; totalBytes: number }
}

export type ProgressListener = (event: ProgressEvent) => void

/** How an image came to be. */
export type ImageKind = 'preset' | 'recipe' | 'directory' | 'tarball' | 'oci'

/** What an OCI image brings besides its tree (see oci/config.ts). */
export interface OciImageRecord {
  /** The reference or archive it came from. */
  source: string
  manifestDigest: string
  configDigest: string
  platform: string
  /** Layer blobs (as stored) and their uncompressed digests, in order. */
  layers: Array<{ digest: string; size: number; diffId: string }>
  config: OciImageConfig
  /** The config's User as the numeric "uid:gid" commands run as by default (null: root). */
  userSpec: string | null
  /** Entries left out while unpacking: device nodes, FIFOs and the like, entries with xattrs (their xattrs). */
  dropped: { devices: number; other: number; xattrs: number }
}

/** A file or directory copied from the host into a recipe image. */
export interface RecipeFile {
  /** Host path (file or directory). */
  from: string
  /** Absolute path inside the image. */
  to: string
  /** Permission bits for the copied entry (e.g. 0o755); the source's mode when absent. */
  mode?: number
}

/** A custom image derived from a preset. */
export interface ImageRecipe {
  base: string
  /** Debian packages installed with their dependencies (never their Recommends unless `recommends`). */
  packages?: string[]
  /** Install the packages' Recommends too. Default false. */
  recommends?: boolean
  /** Host paths of .deb files of your own, installed after `packages` with their dependencies from the archive. */
  debs?: string[]
  files?: RecipeFile[]
}

/** What `register` accepts: a path (directory or .tar/.tar.gz/.tgz/.tar.zst) or a recipe. */
export type ImageSource = string | { path: string } | ImageRecipe

/** The canonical, hashed description of what mmdebstrap builds and what is done after it. */
export interface BuildRecipe {
  kind: 'preset' | 'recipe'
  /** Preset name (for recipes: the base preset). */
  preset: string
  suite: string
  /** 'extract': the packages unpacked, nothing configured (base); 'apt': Debian's essential set and apt, every maintainer script run. */
  variant: 'extract' | 'apt'
  packages: string[]
  /** The packages' Recommends installed too (a recipe asked for them). */
  recommends: boolean
  /** Local .deb files (a recipe's `debs`), by file name and content digest, never by host path. */
  debs: Array<{ name: string; digest: string }>
  trims: string[]
  /** A default virtual environment (presets.ts PYTHON_VENV) that sees Debian's Python packages. */
  pythonVenv: boolean
  postStepsVersion: number
  /** Node from the npm registry (major and npm major), or null. */
  node: { major: number; npmMajor: number } | null
  /** tslab from the npm registry, pinned by its lockfile's digest (code-interpreter only; absent otherwise, so other ids stay). */
  tslab?: { version: string; lockDigest: string }
  /** Recipe files, identified by their content digest (never by host path). */
  files: Array<{ to: string; mode: number | null; digest: string }>
}

export interface ResolvedPackage {
  name: string
  version: string
  arch: string
}

/** One archive InRelease file: checked before a build (its URL) or fetched by it (apt's list name). */
export interface ReleaseFile {
  file: string
  sha256: string
  date: string | null
}

export interface ImageManifest {
  schema: 1
  name: string
  id: string
  kind: ImageKind
  /** Canonical recipe for built images; null for directory and tarball images. */
  recipe: BuildRecipe | null
  recipeDigest: string | null
  /** For directory/tarball images: the source path and, for tarballs, the archive's sha256. */
  source: { path: string; sha256?: string } | null
  archive: {
    /** The apt sources the build used (`deb <uri> <dist> main`); `images build` checks them again. */
    sources: Array<{ uri: string; dist: string }>
    /** Release files mmdebstrap downloaded for this build: their digests are part of the id. */
    fetched: ReleaseFile[]
  } | null
  /** The environment every command starts from (a preset's default virtual environment on PATH); create's env goes on top. */
  env?: Record<string, string>
  /** Packages from the npm registry in the image (Node, npm), verified by their integrity; part of the id. */
  npm?: Array<{ name: string; version: string; integrity: string; shasum: string | null; tarball: string }>
  packages: ResolvedPackage[]
  /** Sum of regular file sizes in bytes. */
  sizeBytes: number
  fileCount: number
  /** sha256 over paths, types, permission bits, symlink targets and file contents (not owners or times). */
  treeDigest: string
  builtAt: string
  buildMode: BuildMode | null
  buildMs: number
  /** For kind 'oci': the image's config and layers. */
  oci?: OciImageRecord
}

export type BuildMode = 'root' | 'unshare'

export interface ResolvedImage {
  name: string
  id: string
  /** Absolute path of the root filesystem directory. Treat it as read-only. */
  rootfs: string
  manifest: ImageManifest
}

export interface BuildResult extends ResolvedImage {
  /** False when the image already existed (or another process built it while this one waited). */
  built: boolean
}

export interface ImageListEntry {
  name: string
  id: string
  sizeBytes: number
  builtAt: string
  preset: boolean
}

/** `<cache>/names/<name>.json`: which image a name points to, and how to rebuild it. */
export interface NameRecord {
  name: string
  id: string
  kind: ImageKind
  /** For recipe images, the recipe as registered (host paths included) so it can be rebuilt. */
  recipe?: ImageRecipe
  source?: string
  updatedAt: string
}
