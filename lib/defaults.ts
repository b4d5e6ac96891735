/**
 * Every default and bound of the library in one place, each with its unit in its name (`_MS`,
 * `_MB` = MiB, `_BYTES`) or its comment. The options' TSDoc and the docs quote these values;
 * the wire's own limits (frame sizes, the connection's windows) are the protocol's (lib/protocol/).
 */

const SECOND_MS = 1_000
const MINUTE_MS = 60 * SECOND_MS
const HOUR_MS = 60 * MINUTE_MS
const DAY_MS = 24 * HOUR_MS
const MIB = 1024 * 1024

// ── A runtime (RuntimeConfig) ──────────────────────────────────────────────────────────────
/** Sandboxes a runtime keeps alive at once (maxConcurrentSandboxes): default and range. */
export const MAX_CONCURRENT_SANDBOXES = { default: 32, min: 1, max: 4096 }
/** Virtual CPUs of a sandbox (defaultCpus, cpus, perImageCaps.maxCpus). */
export const CPUS = { default: 1, min: 1, max: 256 }
/** Memory of a sandbox in MiB (defaultMemoryMb, memoryMb, perImageCaps.maxMemoryMb; 1 TiB at most). */
export const MEMORY_MB = { default: 512, min: 32, max: 1024 * 1024 }
/** Idle timeout in ms (defaultIdleTimeoutMs, idleTimeoutMs): 5 minutes; 0 disables it; 7 days at most. */
export const IDLE_TIMEOUT_MS = { default: 5 * MINUTE_MS, min: 0, max: 7 * DAY_MS }
/** The largest ttlMs a runtime accepts (maxTtlMs), in ms: 24 h unless configured, within 1 s – 365 days. */
export const MAX_TTL_MS = { default: DAY_MS, min: SECOND_MS, max: 365 * DAY_MS }
/** A detached sandbox lives this long (ms) unless its ttlMs says otherwise: a process that forgets it must not leak it for ever. */
export const DETACHED_TTL_MS = HOUR_MS

// ── A sandbox (CreateOptions) ──────────────────────────────────────────────────────────────
/** Most processes of a sandbox's workload (pidsMax). */
export const PIDS_MAX = { default: 1024, min: 8, max: 1_000_000 }
/** Size cap of the sandbox's writable layer in MiB (diskMb). */
export const DISK_MB = { default: 1024, min: 16, max: 1024 * 1024 }
/** How long booting (not building the image) may take, in ms (bootTimeoutMs). */
export const BOOT_TIMEOUT_MS = { default: 20 * SECOND_MS, min: 100, max: 10 * MINUTE_MS }
/** A state entry without a record younger than this (ms) may still be booting in another process: sweep() leaves it. */
export const MAX_BOOT_MS = BOOT_TIMEOUT_MS.max
/** stop(): how long (ms) the agent has to answer sandbox.shutdown, and then to end, before it is killed. */
export const STOP_GRACE_MS = 2 * SECOND_MS
/** stop() of a sandbox with artifacts: it archives them in its shutdown, so it gets this long (ms) before it is killed. */
export const ARTIFACTS_STOP_GRACE_MS = MINUTE_MS
/** After the connection to the agent breaks, how long (ms) the sandbox process has to end on its own before the host ends it. */
export const BROKEN_CONNECTION_GRACE_MS = 2 * SECOND_MS
/** waitFor()/ready(): how long to wait (ms) unless given, and at most. */
export const WAIT_FOR_TIMEOUT_MS = { default: MINUTE_MS, min: 0, max: 10 * MINUTE_MS }

// ── A command (ExecOptions, StartOptions, CancelOptions) ───────────────────────────────────
/** exec()'s deadline (ms) when none is given; start() has none unless asked. */
export const EXEC_TIMEOUT_MS = MINUTE_MS
/** The longest command deadline (ms): 7 days. */
export const MAX_COMMAND_TIMEOUT_MS = 7 * DAY_MS
/** Linux's longest argument or environment string, its NUL included (MAX_ARG_STRLEN). */
export const MAX_ARG_STRLEN = 128 * 1024
/** A command's environment in all: half of what execve takes under the default 8 MiB stack. */
export const MAX_ENV_BYTES = 1024 * 1024
/** Between SIGTERM and SIGKILL on a timeout, abort or graceful cancel, in ms (killGraceMs). */
export const KILL_GRACE_MS = { default: 2 * SECOND_MS, min: 0, max: MINUTE_MS }
/** Beyond the agent's own deadline, how long (ms) the host waits for its answer before it gives up (S200). */
export const HOST_GRACE_MS = 5 * SECOND_MS
/** Bytes of each stream an exec() result keeps (maxBuffer): 256 MiB; past it the result says truncated. */
export const EXEC_MAX_BUFFER_BYTES = { default: 256 * MIB, min: 0, max: 2 ** 31 }
/** Bytes of one command's output the agent keeps for late readers (retainBytes; PROTOCOL.md "Retention"). The agent's default is 8 MiB. */
export const RETAIN_BYTES = { min: 64 * 1024, max: 64 * MIB }
/** Characters of an idempotency key. */
export const IDEMPOTENCY_KEY_CHARS = { min: 1, max: 256 }
/** readLogs(): chunks per page unless `limit` says, and at most. */
export const LOG_PAGE_CHUNKS = { default: 50, min: 1, max: 100 }
/** Credit (bytes) the host grants a command's live output: a follower (Command events) and a logs() iterator. */
export const FOLLOW_WINDOW_BYTES = 4 * MIB
export const LOG_ITERATOR_WINDOW_BYTES = 512 * 1024
/** A followed command silent this long (ms) gets a 'heartbeat' once the agent confirms it still runs (heartbeatMs: 100 ms – 1 h, or 0 for none). */
export const HEARTBEAT_MS = { default: 15 * SECOND_MS, min: 100, max: HOUR_MS }

// ── Files and ports ────────────────────────────────────────────────────────────────────────
/** Credit (bytes) the host grants a file read (readFile, createReadStream, download). */
export const FILE_READ_WINDOW_BYTES = 4 * MIB
/** sb.fs.grep(): matches returned and bytes of a matching line kept, unless asked. */
export const GREP_MAX_MATCHES = { default: 10_000, min: 1, max: 1_000_000 }
export const GREP_MAX_LINE_BYTES = { default: 4096, min: 16, max: MIB }
/** sb.connect()/forward(): how long (ms) a connection to the sandbox's port may take unless given, and at most. */
export const PORT_CONNECT_TIMEOUT_MS = { default: 35 * SECOND_MS, max: 10 * MINUTE_MS }
/** Socket buffer (bytes) on each side of a port connection, beyond the stream's credit window. */
export const PORT_BUFFER_BYTES = 256 * 1024

// ── Pools and snapshots ────────────────────────────────────────────────────────────────────
/** Members of a warm pool (size). */
export const POOL_SIZE = { min: 0, max: 4096 }
/** Boots a pool runs at once at most (refillConcurrency; default twice the cores, lib/pool-refill.ts). */
export const POOL_REFILL_CONCURRENCY = { min: 1, max: 64 }
/** Boots a pool starts per second at most (refillPerSecond; no bound unless set). */
export const POOL_REFILL_PER_SECOND = { min: 1, max: 10_000 }
/** The longest pause (ms) between a pool's boots after failures (the backoff doubles from 100 ms). */
export const POOL_MAX_BACKOFF_MS = 30 * SECOND_MS
/** Credit (bytes) the host grants a snapshot's layer stream: the agent reads this far ahead. */
export const SNAPSHOT_WINDOW_BYTES = 16 * MIB
/**
 * Snapshot files up to fileMaxBytes are written off the event loop in batches of batchFiles files
 * or batchBytes bytes (one libuv pool task each), at most `batches` batches and `bytes` at once.
 */
export const SNAPSHOT_WRITE_BEHIND = {
  fileMaxBytes: MIB,
  batchFiles: 256,
  batchBytes: 4 * MIB,
  batches: 3,
  bytes: 32 * MIB,
}

// ── Artifacts and the state directory ──────────────────────────────────────────────────────
/** What an artifacts archive may hold (maxBytes): 1 GiB unless asked. */
export const ARTIFACTS_MAX_BYTES = 1024 * MIB
/** Globs in artifacts.paths. */
export const ARTIFACTS_MAX_PATHS = 64
/** Ended sandboxes kept in the history (list({ includeHistorical })). */
export const HISTORY_KEEP = 200
/** Lines the history may run over HISTORY_KEEP before it is trimmed back (one trim per this many stops). */
export const HISTORY_TRIM_SLACK = 50
/** Reaper files older than this (ms) whose sandbox is gone are removed by sweep(). */
export const STALE_REAPER_FILE_MS = MINUTE_MS

// ── The code interpreter (sb.runCode, lib/code/) ───────────────────────────────────────────
/** runCode()'s deadline (ms) unless timeoutMs says (null: none); past it the cell is interrupted. */
export const CODE_TIMEOUT_MS = 5 * MINUTE_MS
/** After an interrupt (timeout, abort), how long (ms) the kernel has to stop the cell before it is ended (S227). */
export const CODE_INTERRUPT_GRACE_MS = 5 * SECOND_MS
/** Bytes of output one execution may bring to the host (maxOutputBytes); also each message's cap in the bridge. */
export const CODE_OUTPUT_BYTES = { default: 32 * MIB, min: 64 * 1024, max: 256 * MIB }
/** Outputs (stream chunks, displays) one execution may bring (maxOutputMessages). */
export const CODE_OUTPUT_MESSAGES = { default: 100_000, min: 1, max: 10_000_000 }
/** The longest cell, in bytes of UTF-8. */
export const CODE_MAX_CELL_BYTES = 8 * MIB
/** How long (ms) a kernel may take to start and answer (it then fails with S224). */
export const CODE_KERNEL_START_MS = MINUTE_MS
/** The uids code contexts run as (one each, picked at random in this range). */
export const CODE_CONTEXT_UIDS = { min: 20_000, max: 59_999 }
