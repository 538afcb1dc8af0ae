#!/usr/bin/env python3
"""The mandatory work of a node-to-node file transfer, done by a minimal Python pipeline: bench/transfer.sh's baseline
until 2026-12-06, now run only with TRANSFER_PY_PIPELINE=1. It is bounded by Python (one thread per node, every block
through the interpreter), not by the machine; the baseline is the C pipeline, bench/pipeline/pipeline.c. A client
sends the file over loopback TCP to relay A (sendfile), A writes every byte to its spool and SHA-256s it while
forwarding it over TLS (the same OpenSSL, default suites) to B, B writes the file and SHA-256s it; A and B fsync at
the end. Three processes, no framing, no resume bookkeeping, no spool read-back.

usage: transfer_pipeline.py SOURCE SPOOL TARGET CERT KEY   -> prints seconds and B's SHA-256
"""
import hashlib, os, socket, ssl, sys, time
from multiprocessing import Process, Queue

source, spool, target, cert, key = sys.argv[1:6]
BLOCK = 1 << 20


def store(connection, path, forward=None):
    """Writes everything `connection` delivers to `path` (and forwards it), fsyncs; returns the hex SHA-256."""
    digest = hashlib.sha256()
    buffer = bytearray(BLOCK)
    view = memoryview(buffer)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    while True:
        n = connection.recv_into(buffer)
        if n == 0:
            break
        os.write(fd, view[:n])
        digest.update(view[:n])
        if forward is not None:
            forward.sendall(view[:n])
    os.fsync(fd)
    os.close(fd)
    return digest.hexdigest()


def receiver(listener, out):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    connection, _ = listener.accept()
    tls = context.wrap_socket(connection, server_side=True)
    out.put(store(tls, target))


def relay(listener, b_address):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    tls = context.wrap_socket(socket.create_connection(b_address))
    connection, _ = listener.accept()
    store(connection, spool, forward=tls)
    # Read what B sent (TLS 1.3 session tickets) until it closes: closing with unread bytes would reset the
    # connection and drop the tail of the file.
    tls.shutdown(socket.SHUT_WR)
    while tls.recv(65536):
        pass
    tls.close()


if __name__ == "__main__":
    b_listener = socket.socket()
    b_listener.bind(("127.0.0.1", 0))
    b_listener.listen(1)
    a_listener = socket.socket()
    a_listener.bind(("127.0.0.1", 0))
    a_listener.listen(1)
    results = Queue()
    b = Process(target=receiver, args=(b_listener, results))
    a = Process(target=relay, args=(a_listener, b_listener.getsockname()))
    b.start()
    a.start()
    time.sleep(0.3)  # both listening and the TLS handshake done before the clock starts
    start = time.monotonic()
    with socket.create_connection(a_listener.getsockname()) as sender, open(source, "rb") as f:
        sender.sendfile(f)
    digest = results.get()
    seconds = time.monotonic() - start
    a.join()
    b.join()
    print(f"{seconds:.3f} {digest}")
