#!/usr/bin/env python3
"""Smoke test for the seed's gateway and backend (meson test --suite bench-smoke).

  gateway_smoke.py GATEWAY BACKEND

Starts the backend (--delay-ms 0) on threads and on fibers and, for each,
the gateway on threads and on fibers (WEFT_FIBERS=name:gateway*, one worker)
with each --backend-client (keep-alive, per-request). Each gateway must
answer 200 "Ok!" to every GET of 3 kept-alive connections at once, 5 GETs
each: the same connection's requests ride one keep-alive client in turn.
Then the check is shown to be real: with the backend stopped the gateway
answers 502 naming the failure, and a bad --backend-client value exits 2
naming the value. Only 127.0.0.1; every wait is bounded.
"""
import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time

failures = []


def check(ok, message):
    print(("ok    " if ok else "FAIL  ") + message, flush=True)
    if not ok:
        failures.append(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command, env_extra, port):
    """The process, once it accepts on `port` (within 10 s), or None."""
    env = dict(os.environ)
    env.pop("WEFT_FIBERS", None)
    env.update(env_extra)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(proc.stderr.read(), file=sys.stderr)
            return None
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.05)
    stop(proc)
    return None


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def get_all(port, requests):
    """(status, body) of `requests` GETs on one kept-alive connection."""
    answers = []
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for _ in range(requests):
            connection.request("GET", "/")
            response = connection.getresponse()
            answers.append((response.status, response.read()))
    except (OSError, http.client.HTTPException) as error:
        answers.append((None, repr(error).encode()))
    finally:
        connection.close()
    return answers


def load(port, connections=3, requests=5):
    results = [None] * connections

    def one(i):
        results[i] = get_all(port, requests)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return [answer for result in results if result for answer in result]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gateway_smoke.py GATEWAY BACKEND")
    gateway_bin, backend_bin = sys.argv[1:]
    fibers = {"WEFT_FIBERS": "name:gateway*", "WEFT_WORKERS": "1"}
    for backend_mode in ("threads", "fibers"):
        backend_port = free_port()
        backend = start([backend_bin, "--port", str(backend_port), "--delay-ms", "0", "--threads", "64", "--pool",
                         backend_mode], {}, backend_port)
        check(backend is not None, f"backend on {backend_mode} listens")
        if backend is None:
            continue
        for gateway_mode, gateway_env in (("threads", {}), ("fibers", fibers)):
            for client in ("keep-alive", "per-request"):
                what = f"gateway on {gateway_mode}, {client} clients, backend on {backend_mode}"
                port = free_port()
                gateway = start([gateway_bin, "--port", str(port), "--backend-port", str(backend_port), "--threads",
                                 "8", "--backend-client", client], gateway_env, port)
                check(gateway is not None, f"{what}: listens")
                if gateway is None:
                    continue
                answers = load(port)
                ok = [a for a in answers if a == (200, b"Ok!")]
                check(len(answers) == 15 and len(ok) == 15,
                      f"{what}: {len(ok)} of 15 GETs answered 200 Ok! {[a for a in answers if a != (200, b'Ok!')][:3]}")
                check(stop(gateway) == 0, f"{what}: exits 0 on SIGTERM")
        check(stop(backend) == 0, f"backend on {backend_mode}: exits 0 on SIGTERM")

    # The check is real: no backend, no "Ok!".
    dead_port = free_port()
    port = free_port()
    gateway = start([gateway_bin, "--port", str(port), "--backend-port", str(dead_port)], fibers, port)
    check(gateway is not None, "gateway without a backend listens")
    if gateway is not None:
        answers = get_all(port, 2)
        check(all(status == 502 and body.startswith(b"backend failed") for status, body in answers),
              f"without a backend the gateway answers 502 backend failed: {answers}")
        stop(gateway)

    bad = subprocess.run([gateway_bin, "--port", str(port), "--backend-port", "1", "--backend-client", "sometimes"],
                         capture_output=True, text=True, timeout=10)
    check(bad.returncode == 2 and "sometimes" in bad.stderr,
          f"--backend-client sometimes exits 2 naming the value: {bad.returncode} {bad.stderr.strip()!r}")

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
