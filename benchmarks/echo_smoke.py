#!/usr/bin/env python3
"""Smoke test for echo_server and echo_load (meson test --suite bench-smoke).

  echo_smoke.py ECHO_SERVER ECHO_LOAD

For each mode of echo_server: starts it on port 0, reads the port it prints,
drives 10 connections for 1 s with echo_load (which checks every echoed
byte), then stops it with SIGTERM and expects exit 0. Every mode is in every
build; the fiber modes run on one worker, so their ten connections are
served by fibers that park (tests/hooks_test.cpp proves the parking itself,
without the spare workers that would stand in for a blocked one). Last, a server that corrupts one byte must
make echo_load fail: the check is real.
"""
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time

MODES = ["epoll", "thread", "weft", "hooked"]
FIBER_MODES = {"weft", "hooked"}
failures = []


def check(ok, message):
    print(("ok    " if ok else "FAIL  ") + message, flush=True)
    if not ok:
        failures.append(message)


def read_port(server, timeout=5.0):
    """The port from the server's "listening on 127.0.0.1:PORT" line, or None."""
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([server.stdout], [], [], left)[0]:
            return None
        chunk = os.read(server.stdout.fileno(), 1)
        if not chunk:
            return None
        line += chunk
    match = re.fullmatch(rb"listening on 127\.0\.0\.1:(\d+)\n", line)
    return int(match.group(1)) if match else None


def stop(server):
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
    try:
        return server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
        return None


def test_mode(server_exe, load_exe, mode):
    command = [server_exe, "--mode", mode, "--port", "0"]
    if mode in FIBER_MODES:
        command += ["--workers", "1"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        port = read_port(server)
        if port is None:
            code = server.wait(timeout=5)
            err = server.stderr.read().decode(errors="replace").strip()
            check(False, f"{mode}: no 'listening on' line (exit {code}: {err})")
            return
        load = subprocess.run([load_exe, "--port", str(port), "--connections", "10", "--seconds", "1",
                               "--warmup", "0", "--server-pid", str(server.pid)],
                              capture_output=True, text=True, timeout=20)
        ok = load.returncode == 0 and "every echo verified" in load.stdout
        detail = load.stdout.splitlines()[1].strip() if ok else f"{load.stdout.strip()} {load.stderr.strip()}"
        check(ok, f"{mode}: echo_load exit {load.returncode}: {detail}")
    finally:
        code = stop(server)
    check(code == 0, f"{mode}: server exit {code} after SIGTERM")


def corrupting_server(listener, stopping):
    """Echoes with the first byte of every reply flipped."""
    def serve(conn):
        with conn:
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                try:
                    conn.sendall(bytes([data[0] ^ 0xFF]) + data[1:])
                except OSError:
                    return
    listener.settimeout(0.1)
    while not stopping.is_set():
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        except OSError:
            return
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def test_mismatch(load_exe):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    stopping = threading.Event()
    thread = threading.Thread(target=corrupting_server, args=(listener, stopping), daemon=True)
    thread.start()
    try:
        load = subprocess.run([load_exe, "--port", str(listener.getsockname()[1]), "--connections", "10",
                               "--seconds", "0.2", "--warmup", "0"], capture_output=True, text=True, timeout=20)
    finally:
        stopping.set()
        thread.join()
        listener.close()
    check(load.returncode == 1 and "mismatch" in load.stderr,
          f"a corrupted echo fails echo_load (exit {load.returncode}: {load.stderr.strip()})")


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: echo_smoke.py ECHO_SERVER ECHO_LOAD")
    server_exe, load_exe = sys.argv[1:]
    for mode in MODES:
        test_mode(server_exe, load_exe, mode)
    test_mismatch(load_exe)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
