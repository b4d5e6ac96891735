/** Writes to stdout or stderr, waiting for it to drain: a slow reader slows the sandbox's stream, never fills our memory. */
export async function write(out: NodeJS.WriteStream, data: Buffer | string): Promise<void> {
  if (!out.write(data)) await new Promise((resolve) => out.once('drain', resolve))
}
