/** krunbox: run untrusted commands in isolated sandboxes, in-process, with no server. */
export { Sandbox } from './sandbox.js'
export {
  Runtime,
  type RuntimeConfig,
  type CreateOptions,
  type SandboxListing,
  type ImageCaps,
  type ListOptions,
  type NetworkPolicyOptions,
  type SandboxCapability,
} from './runtime.js'
export {
  Command,
  type CommandResult,
  type LogChunk,
  type LogStream,
  type CommandEvents,
  type CommandHeartbeat,
  type CancelOptions,
} from './command.js'
export type { CommandSnapshot, CommandStatus, CommandUsage } from './command-snapshot.js'
export type {
  ExecOptions,
  ExecOnlyOptions,
  ExecResult,
  StartOptions,
  SandboxEvents,
  SandboxAgentInfo,
  SandboxService,
  StopResult,
} from './sandbox.js'
export type { CollectOptions } from './command-collect.js'
export type {
  CodeContext,
  CodeEvent,
  CodeLanguage,
  CodeResult,
  CreateCodeContextOptions,
  Execution,
  ExecutionError,
  OutputTruncation,
  RunCodeOptions,
} from './code/types.js'
export { Terminal, type TerminalOptions, type TerminalSize, type TerminalEvents } from './terminal.js'
export type { SandboxStatus, DestroyedReason } from './sandbox-status.js'
export {
  PortSocket,
  PortForward,
  type PortConnectOptions,
  type PortForwardOptions,
  type PortForwardEvents,
} from './ports.js'
export { SandboxFs, type FileEntry, type FileMeta, type GrepMatch, type SedFileResult } from './fs.js'
export {
  SandboxError,
  ERROR_CODES,
  isSandboxError,
  type SandboxErrorCode,
  type ErrorType,
  type SandboxErrorEnvelope,
} from './errors.js'
export { hostProbe } from './probe.js'
export { ImageStore, PRESETS } from './images/index.js'
export type {
  BuildOptions,
  BuildResult,
  ImageListEntry,
  ImageManifest,
  ImageRecipe,
  ImageSource,
  ImageStoreOptions,
  OciImageRecord,
  PullImageOptions,
  PullPolicy,
  ProgressEvent,
  ProgressListener,
  ProgressStage,
  RecipeFile,
  ResolvedImage,
} from './images/index.js'
export type { HostProbe } from './native.js'
export type { SandboxPool, PoolOptions, PoolStats, PoolEvents } from './pool.js'
export type { SnapshotStore, SnapshotInfo, SnapshotRef } from './snapshots.js'
export type { ExportOptions, ExportResult, ExportImageConfig } from './images/oci/export-options.js'
export type { ArtifactsOptions, ArtifactsRecord, ArtifactWhen } from './artifacts.js'
export type { NetworkPolicy } from './network/policy.js'
export type { NetworkDenial, NetworkUsage } from './network/gateway.js'
