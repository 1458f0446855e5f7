#!/usr/bin/env python3
"""A small DNS responder for the resolver tests and benchmarks: answers
every A query for NAME after --delay-ms, on UDP --address:--port, with an
address derived from NAME, so that a caller can check that it got its own
answer:

  h<N>.weft.test     -> 127.1.<N // 256>.<N % 256>
  stats.weft.test    -> 127.2.<hi>.<lo>, at once: the most queries that were
                        waiting for their answer at the same moment
  anything else      -> NXDOMAIN

AAAA and other types get an empty NOERROR answer. It prints "ready" once
bound, and exits when its parent dies (it is started in the caller's own
network namespace, on loopback only) or on SIGTERM.
"""
import argparse
import asyncio
import ctypes
import signal
import struct
import sys


def parse_question(packet):
    """The query's (id, name, qtype, end of question), or None."""
    if len(packet) < 12:
        return None
    ident, _flags, qdcount = struct.unpack("!HHH", packet[:6])
    if qdcount != 1:
        return None
    labels, offset = [], 12
    while offset < len(packet):
        length = packet[offset]
        offset += 1
        if length == 0:
            break
        labels.append(packet[offset:offset + length].decode("ascii", "replace"))
        offset += length
    if offset + 4 > len(packet):
        return None
    qtype = struct.unpack("!H", packet[offset:offset + 2])[0]
    return ident, ".".join(labels).lower(), qtype, offset + 4


def answer(packet, question, address):
    """The reply to `packet`: one A record, none, or NXDOMAIN (address None
    with nxdomain)."""
    ident, _name, _qtype, end = question
    flags = 0x8180  # response, recursion desired and available, NOERROR
    records = b""
    if address is None:
        ancount = 0
    elif address == "nxdomain":
        flags |= 3
        ancount = 0
    else:
        ancount = 1
        records = struct.pack("!HHHIH", 0xC00C, 1, 1, 0, 4) + bytes(address)
    header = struct.pack("!HHHHHH", ident, flags, 1, ancount, 0, 0)
    return header + packet[12:end] + records


class Responder(asyncio.DatagramProtocol):
    def __init__(self, delay):
        self.delay = delay
        self.waiting = 0
        self.most_waiting = 0
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, packet, peer):
        question = parse_question(packet)
        if question is None:
            return
        name, qtype = question[1], question[2]
        if name == "stats.weft.test":
            most = self.most_waiting
            address = [127, 2, most // 256 % 256, most % 256] if qtype == 1 else None
            self.transport.sendto(answer(packet, question, address), peer)
            return
        if name.startswith("h") and name.endswith(".weft.test") and name[1:-len(".weft.test")].isdigit():
            n = int(name[1:-len(".weft.test")])
            address = [127, 1, n // 256 % 256, n % 256] if qtype == 1 else None
        else:
            address = "nxdomain"
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        asyncio.get_running_loop().call_later(self.delay, self.reply, packet, question, address, peer)

    def reply(self, packet, question, address, peer):
        self.waiting -= 1
        self.transport.sendto(answer(packet, question, address), peer)


async def serve(args):
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: Responder(args.delay_ms / 1000.0),
                                                       local_addr=(args.address, args.port))
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    await stop
    transport.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--delay-ms", type=int, default=200)
    args = parser.parse_args()
    if not args.address.startswith("127."):
        sys.exit("dns_responder: loopback addresses only")
    # PR_SET_PDEATHSIG: never outlive the test that started it.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
