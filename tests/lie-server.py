#!/usr/bin/env python3
"""lie-server.py - an HTTP server that lies, for dcr's hostile-input tests
(tests/t09NN-*.sh). Standard library only.

usage: lie-server.py --port-file FILE MODE
  huge     every GET: 200, "Content-Length: 3000000000", 100 bytes, close
  short    every GET: 200, "Content-Length: 1000", 100 bytes, close
  reason   every request: 400 with a reason phrase and a body holding
           terminal escape sequences (ESC ] 0 ; ... BEL, ESC [ 2 J)
  deny     every request: 403 Forbidden, "go away"
  endless  every request: 200, an S3 ListObjectsV2 page that names nothing,
           truncated, with a new NextContinuationToken (a listing without end)
Each request is logged to stderr as "METHOD PATH AUTHORIZATION".
"""
import itertools
import socket
import socketserver
import sys
import threading

import portfile

MODE = None
TOKENS = itertools.count()


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        f = self.request.makefile("rb")
        line = f.readline().decode("latin-1").strip()
        auth = ""
        while True:
            h = f.readline()
            if not h or h in (b"\r\n", b"\n"):
                break
            if h.lower().startswith(b"authorization:"):
                auth = h.split(b":", 1)[1].strip().decode("latin-1")
        sys.stderr.write("%s %s\n" % (line, auth))
        sys.stderr.flush()
        out = self.request
        if MODE == "huge":
            out.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3000000000\r\n"
                        b"Connection: close\r\n\r\n" + b"x" * 100)
        elif MODE == "short":
            out.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n"
                        b"Connection: close\r\n\r\n" + b"x" * 100)
        elif MODE == "endless":
            body = (b'<?xml version="1.0" encoding="UTF-8"?>'
                    b'<ListBucketResult><Name>b</Name><KeyCount>0</KeyCount>'
                    b'<IsTruncated>true</IsTruncated><NextContinuationToken>t%d'
                    b'</NextContinuationToken></ListBucketResult>' % next(TOKENS))
            out.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        elif MODE == "reason":
            body = b"\x1b]0;owned\x07\x1b[2Jgone"
            out.sendall(b"HTTP/1.1 400 Bad\x1b[31mRequest\x1b[0m\r\nContent-Length: %d\r\n"
                        b"Connection: close\r\n\r\n" % len(body) + body)
        else:
            body = b"go away\n"
            out.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n"
                        b"Connection: close\r\n\r\n" % len(body) + body)
        try:
            out.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global MODE
    args = sys.argv[1:]
    if len(args) != 3 or args[0] != "--port-file":
        sys.exit(__doc__)
    MODE = args[2]
    srv = Server(("127.0.0.1", 0), Handler)
    portfile.serve(srv, args[1])


if __name__ == "__main__":
    main()
