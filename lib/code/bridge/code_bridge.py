"""krunbox's code bridge: one Jupyter kernel, driven over JSON lines on stdin and stdout.

The host starts one bridge per code context (sb.start, as the context's own uid). The bridge
starts the kernel with jupyter_client over the ipc transport, so the kernel's sockets are
files in a 0700 directory of this uid and it opens no TCP port at all. It forwards what the
kernel publishes for the cell that runs (stream, display_data, execute_result, error) as it
comes, each as one line. Everything it prints is checked again by the host, which trusts none
of it; the caps here only spare the sandbox's own memory and the wire.

Requests (stdin), one JSON object per line:
  {"op": "execute", "id": str, "code": str, "maxBytes": int}
  {"op": "interrupt"}              SIGINT to the kernel (KeyboardInterrupt in Python)
  {"op": "shutdown"}               the kernel is stopped and the bridge exits (stdin EOF too)
Lines printed (stdout), one JSON object each, "t" first:
  ready    {pid, language, implementation, version}      the kernel answered kernel_info
  fatal    {reason}                                       the kernel could not start; exit 2
  stream   {id, name, text}
  display  {id, data, main, count?}                       display_data / execute_result
  error    {id, name, value, traceback}
  capped   {id, droppedBytes, droppedMessages}            once, when maxBytes was passed
  done     {id, status, count}                            the cell's reply and idle status
  died     {id?, exitCode}                                the kernel ended by itself; exit 3
"""

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import zmq
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

READY_TIMEOUT_S = 60.0
# After the execute_reply, how long to wait for the kernel's idle status (it may have been lost
# when a message over MAXMSGSIZE cut the iopub connection).
IDLE_AFTER_REPLY_S = 0.5
LIVENESS_EVERY_S = 0.2
# A failed cell's stderr kept to describe its error when the kernel sends none (tslab).
STDERR_KEPT = 64 * 1024
# tslab aborts the requests it gets within 200 ms of a failed cell.
ABORT_WINDOW_S = 0.25
# Messages read from one socket before the others (stdin's requests) are looked at again.
BATCH = 64
STDIN_LINE_MAX = 64 * 1024 * 1024
PR_SET_PDEATHSIG = 1
# The iopub messages that are a cell's outputs (counted against its budget).
OUTPUTS = ("stream", "display_data", "update_display_data", "execute_result")
SKIPPED = object()


def emit(obj):
    data = (json.dumps(obj, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


def die_with_parent():
    """The kernel leads its own session (jupyter_client), so a SIGKILL of the bridge's group
    would miss it: it gets SIGKILL when the bridge ends, whatever ends it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class IpcColonKernelManager(KernelManager):
    """tslab binds ipc endpoints as <ip>:<port> where jupyter_client connects to <ip>-<port>."""

    def _make_url(self, channel):
        if self.transport == "tcp":
            return super()._make_url(channel)
        return "%s://%s:%s" % (self.transport, self.ip, getattr(self, "%s_port" % channel))


def kernel_spec(language):
    """argv, the manager class and the Jupyter language of a kernel, or a reason why none is here."""
    if language == "python":
        try:
            import ipykernel  # noqa: F401
        except ImportError:
            return None, "python3 has no ipykernel (Debian's python3-ipykernel)"
        argv = [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            "--InteractiveShell.colors=NoColor",
            "--HistoryManager.hist_file=:memory:",
        ]
        return (argv, KernelManager, "python"), None
    if language in ("javascript", "typescript"):
        tslab = shutil.which("tslab")
        if tslab is None:
            return None, "there is no tslab (the Jupyter kernel for JavaScript and TypeScript) on PATH"
        argv = [tslab, "kernel", "--config-path", "{connection_file}"]
        if language == "javascript":
            argv.append("--js")
        return (argv, IpcColonKernelManager, language), None
    return None, "no kernel is known for language %r" % language


class Bridge:
    def __init__(self, config):
        self.config = config
        self.dir = tempfile.mkdtemp(prefix="krunbox-code-")
        self.km = None
        self.ctx = zmq.Context()
        self.current = None  # the running cell: {id, msg_id, budget, dropped..., reply, idle_at...}
        self.stdin_buf = bytearray()
        self.stdin_open = True
        # An execute waiting for the kernel's abort window to pass (tslab).
        self.queued = None
        self.not_before = 0.0

    # ── the kernel ────────────────────────────────────────────────────────────────────────
    def start(self):
        spec, reason = kernel_spec(self.config["language"])
        if spec is None:
            emit({"t": "fatal", "reason": reason})
            return False
        argv, manager, language = spec
        spec_dir = os.path.join(self.dir, "kernels", "k")
        os.makedirs(spec_dir)
        with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
            json.dump({"argv": argv, "display_name": language, "language": language}, f)
        self.km = manager(
            kernel_name="k",
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[os.path.join(self.dir, "kernels")]),
            transport="ipc",
            ip=os.path.join(self.dir, "k"),
            connection_file=os.path.join(self.dir, "connection.json"),
        )
        # HOME and the kernel's caches in the private directory (the uid may have no home);
        # the context's own env goes on top.
        env = dict(os.environ)
        env["HOME"] = self.dir
        env["IPYTHONDIR"] = os.path.join(self.dir, "ipython")
        env["MPLCONFIGDIR"] = os.path.join(self.dir, "matplotlib")
        env.update(self.config.get("env") or {})
        try:
            self.km.start_kernel(
                cwd=self.config.get("cwd") or None,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=sys.stderr.fileno(),
                preexec_fn=die_with_parent,
            )
        except Exception as err:  # the kernel's program could not run
            emit({"t": "fatal", "reason": "the kernel did not start: %s" % err})
            return False
        self.session = self.km.session
        self.iopub = self.km.connect_iopub()
        self.shell = self.km.connect_shell()
        # A message this large would cost the sandbox's memory for nothing: ZeroMQ drops the
        # connection instead (it comes back; the cell's reply still arrives on shell).
        self.iopub.setsockopt(zmq.MAXMSGSIZE, int(self.config["maxMessageBytes"]))
        return self.wait_ready()

    def wait_ready(self):
        """kernel_info until the kernel answers (its iopub is subscribed once it does)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        poller = zmq.Poller()
        poller.register(self.shell, zmq.POLLIN)
        asked = set()
        while time.monotonic() < deadline:
            msg = self.session.msg("kernel_info_request")
            self.session.send(self.shell, msg)
            asked.add(msg["header"]["msg_id"])
            got = dict(poller.poll(1000))
            if self.shell in got:
                # The answer to any of the requests: the first may be answered after the second is sent.
                reply = self.recv(self.shell)
                if reply is None or reply["parent_header"].get("msg_id") not in asked:
                    continue
                info = reply["content"].get("language_info") or {}
                # Settles the iopub subscription: the first cell's output is not lost.
                self.drain_iopub(0.05)
                emit(
                    {
                        "t": "ready",
                        "pid": self.km.provisioner.pid if self.km.provisioner else None,
                        "language": str(info.get("name", ""))[:64],
                        "implementation": str(reply["content"].get("implementation", ""))[:64],
                        "version": str(info.get("version", ""))[:64],
                    }
                )
                return True
            if not self.km.is_alive():
                emit({"t": "fatal", "reason": "the kernel exited while starting (%s)" % self.exit_code()})
                return False
        emit({"t": "fatal", "reason": "the kernel did not answer within %d s" % READY_TIMEOUT_S})
        return False

    def drain_iopub(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.iopub.poll(10):
                self.recv(self.iopub)

    def exit_code(self):
        proc = getattr(self.km.provisioner, "process", None) if self.km else None
        return None if proc is None else proc.poll()

    def recv_iopub(self):
        """The next iopub message, parsed; SKIPPED for one that is not this cell's or that it
        cannot keep (counted from its size, its content neither parsed nor checked: a cell
        flooding outputs past its cap costs no more than reading them); None when there is none."""
        try:
            frames = self.iopub.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None
        cur = self.current
        try:
            _, parts = self.session.feed_identities(frames, copy=False)
            kind = json.loads(parts[1].bytes).get("msg_type")
            parent = json.loads(parts[2].bytes)
        except Exception:
            return SKIPPED
        if cur is None or not isinstance(parent, dict) or parent.get("msg_id") != cur["msg_id"]:
            return SKIPPED
        if kind in OUTPUTS:
            size = sum(len(p.buffer) for p in parts[4:])
            if cur["capped"] or size > cur["budget"] - cur["used"]:
                self.drop(cur, size)
                return SKIPPED
        try:
            return self.session.deserialize(parts, content=True, copy=False)
        except Exception:
            return SKIPPED

    def recv(self, sock):
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            _, frames = self.session.feed_identities(frames, copy=False)
            return self.session.deserialize(frames, content=True, copy=False)
        except zmq.Again:
            return None
        except Exception:  # a message that does not parse or sign is not the kernel's
            return None

    def stop(self):
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:
                pass
        self.ctx.destroy(linger=0)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ── requests ──────────────────────────────────────────────────────────────────────────
    def read_requests(self):
        try:
            data = os.read(0, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            self.stdin_open = False
            return
        self.stdin_buf += data
        if len(self.stdin_buf) > STDIN_LINE_MAX:
            self.stdin_open = False
            return
        while b"\n" in self.stdin_buf:
            line, _, rest = self.stdin_buf.partition(b"\n")
            self.stdin_buf = bytearray(rest)
            try:
                self.handle(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue

    def handle(self, req):
        op = req["op"]
        if op == "execute" and self.current is None and self.queued is None:
            self.queued = req
        elif op == "interrupt":
            self.km.interrupt_kernel()
        elif op == "shutdown":
            self.stdin_open = False

    def start_cell(self, req):
        content = {
            "code": str(req["code"]),
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        # The host's id is the request's msg_id: the kernel's messages for it carry it as
        # their parent, so nothing maps one to the other.
        cell_id = str(req["id"])
        header = self.session.msg_header("execute_request")
        header["msg_id"] = cell_id
        msg = self.session.msg("execute_request", content, header=header)
        self.session.send(self.shell, msg)
        self.current = {
            "id": cell_id,
            "msg_id": cell_id,
            "budget": int(req["maxBytes"]),
            "used": 0,
            "droppedBytes": 0,
            "droppedMessages": 0,
            "capped": False,
            "reply": None,
            "idle": False,
            "replied_at": 0.0,
            "stderr": "",
            "errored": False,
        }

    # ── the kernel's messages ─────────────────────────────────────────────────────────────
    def on_iopub(self, msg):
        cur = self.current
        if cur is None or msg["parent_header"].get("msg_id") != cur["msg_id"]:
            return
        kind = msg["header"]["msg_type"]
        c = msg["content"]
        if kind == "status":
            if c.get("execution_state") == "idle":
                cur["idle"] = True
            return
        if kind == "stream":
            out = {"t": "stream", "id": cur["id"], "name": c.get("name"), "text": c.get("text", "")}
            if out["name"] == "stderr" and isinstance(out["text"], str):
                cur["stderr"] = (cur["stderr"] + out["text"])[-STDERR_KEPT:]
        elif kind in ("display_data", "update_display_data"):
            out = {"t": "display", "id": cur["id"], "data": c.get("data", {}), "main": False}
        elif kind == "execute_result":
            out = {"t": "display", "id": cur["id"], "data": c.get("data", {}), "main": True}
            out["count"] = c.get("execution_count")
        elif kind == "error":
            out = {
                "t": "error",
                "id": cur["id"],
                "name": c.get("ename", ""),
                "value": c.get("evalue", ""),
                "traceback": c.get("traceback", []),
            }
            cur["errored"] = True
        else:
            return
        self.forward(cur, out, kind == "error")

    def forward(self, cur, out, is_error):
        line = json.dumps(out, ensure_ascii=True, separators=(",", ":"))
        size = len(line) + 1
        # An error is the cell's outcome: it may use a reserve beyond the output budget.
        room = cur["budget"] - cur["used"] + (self.config["errorReserveBytes"] if is_error else 0)
        # Once something was dropped, later outputs are too (the host keeps the first part, in
        # order), but not the error.
        if (cur["capped"] and not is_error) or size > room:
            self.drop(cur, size)
            return
        cur["used"] += size
        emit(out)

    def drop(self, cur, size):
        cur["droppedBytes"] += size
        cur["droppedMessages"] += 1
        cur["capped"] = True

    def on_shell(self, msg):
        cur = self.current
        if cur is None or msg["parent_header"].get("msg_id") != cur["msg_id"]:
            return
        if msg["header"]["msg_type"] == "execute_reply":
            cur["reply"] = msg["content"]
            cur["replied_at"] = time.monotonic()

    def maybe_done(self):
        cur = self.current
        if cur is None or cur["reply"] is None:
            return
        if not cur["idle"] and time.monotonic() - cur["replied_at"] < IDLE_AFTER_REPLY_S:
            return
        if cur["capped"]:
            emit(
                {
                    "t": "capped",
                    "id": cur["id"],
                    "droppedBytes": cur["droppedBytes"],
                    "droppedMessages": cur["droppedMessages"],
                }
            )
        reply = cur["reply"]
        if reply.get("status") == "error" and not cur["errored"]:
            # tslab prints a cell's exception on stderr and sends no error message.
            self.forward(cur, error_from_stderr(cur), True)
            # ... and aborts every request it gets within 200 ms of a failed cell.
            self.not_before = time.monotonic() + ABORT_WINDOW_S
        emit({"t": "done", "id": cur["id"], "status": reply.get("status"), "count": reply.get("execution_count")})
        self.current = None

    def run(self):
        os.set_blocking(0, False)
        poller = zmq.Poller()
        poller.register(self.iopub, zmq.POLLIN)
        poller.register(self.shell, zmq.POLLIN)
        poller.register(0, zmq.POLLIN)
        last_check = time.monotonic()
        while self.stdin_open:
            waiting = self.queued is not None or (self.current is not None and self.current["reply"] is not None)
            timeout = 20 if waiting else 200
            ready = dict(poller.poll(timeout))
            if self.iopub in ready:
                # iopub first: a cell's output is published before its reply. A batch at a
                # time: a cell that floods it must not keep an interrupt on stdin unread.
                for _ in range(BATCH):
                    msg = self.recv_iopub()
                    if msg is None:
                        break
                    if msg is not SKIPPED:
                        self.on_iopub(msg)
            if self.shell in ready:
                for _ in range(BATCH):
                    msg = self.recv(self.shell)
                    if msg is None:
                        break
                    self.on_shell(msg)
            if 0 in ready:
                self.read_requests()
            self.maybe_done()
            if self.queued is not None and self.current is None and time.monotonic() >= self.not_before:
                req, self.queued = self.queued, None
                try:
                    self.start_cell(req)
                except (ValueError, KeyError, TypeError):
                    pass
            now = time.monotonic()
            if now - last_check >= LIVENESS_EVERY_S:
                last_check = now
                if not self.km.is_alive():
                    emit({"t": "died", "id": self.current and self.current["id"], "exitCode": self.exit_code()})
                    return 3
        return 0


def error_from_stderr(cur):
    """The error of a cell whose kernel only printed it: its last `Name: value` line of stderr."""
    text = cur["stderr"]
    name, value = "Error", ""
    for line in reversed(text.splitlines()):
        m = re.match(r"^\s*([A-Za-z_$][\w$.]*(?:Error|Exception)|Error): ?(.*)$", line)
        if m:
            name, value = m.group(1), m.group(2)
            break
    return {"t": "error", "id": cur["id"], "name": name, "value": value, "traceback": text.splitlines()}


def main():
    # Files a cell writes are readable by the sandbox's other users, as a command's are: the
    # agent (fs.readFile, download) is one. The private directory is 0700 whatever the umask.
    os.umask(0o022)
    config = json.loads(sys.argv[1])
    bridge = Bridge(config)
    code = 2
    # SIGTERM (a cancel of this command) ends the kernel and removes the directory too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(code))
    try:
        if bridge.start():
            code = bridge.run()
    finally:
        bridge.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
