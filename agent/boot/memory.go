package boot

// The agent's own memory. What it keeps is bounded by design (64 MiB of
// retained output, maxQueuedBytes of frames behind the socket), but Go's GC
// lets the heap grow to twice what is live before it collects: a soft limit
// makes it collect sooner instead, so the agent stays well inside the memory
// cgroup leaf the host gives it (lib/drivers/cgroups.ts, AGENT_MEMORY_MB),
// whose limit is the hard bound.

import "runtime/debug"

// ownMemoryLimit is the agent's soft memory limit (Go runtime memory only).
// Measured under 100 commands flooding output at once: 128 MiB sits too close
// to what is live then (retained output, a read buffer per pipe, the queue)
// and the GC ran without pause (the flood took 7x as long); 192 MiB kept the
// peak at 170 MiB at full speed; without a limit it reached 233 MiB.
const ownMemoryLimit = 192 << 20

func limitOwnMemory() { debug.SetMemoryLimit(ownMemoryLimit) }
