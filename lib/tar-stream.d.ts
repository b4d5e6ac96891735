/**
 * tar-stream is pinned to 3.1.7 (package.json: later versions pull in the Bare runtime's shims,
 * 7 MB that Node never uses), whose types come from @types/tar-stream. The code here was written
 * against the types 3.1.8+ ship: `Header`, and the PAX records 3.1.7 already puts on a header.
 */
import 'tar-stream'

declare module 'tar-stream' {
  interface Headers {
    /** The entry's PAX extended header records (path, linkpath, size, xattrs…), when it had one. */
    pax?: Record<string, string>
  }
  type Header = Headers
}
