#!/usr/bin/env python3
"""lie-server.py - an HTTP server that lies, for dcr's hostile-input tests
(tests/t09NN-*.sh). Standard library only.

usage: lie-server.py --port-file FILE MODE [DIR]
  huge     every GET: 200, "Content-Length: 3000000000", 100 bytes, close
  short    every GET: 200, "Content-Length: 1000", 100 bytes, close
  reason   every request: 400 with a reason phrase and a body holding
           terminal escape sequences (ESC ] 0 ; ... BEL, ESC [ 2 J)
  deny     every request: 403 Forbidden, "go away"
  endless  every request: 200, an S3 ListObjectsV2 page that names nothing,
           truncated, with a new NextContinuationToken (a listing without end)
  pad      GET of DIR's manifest.dcrm objects as they are; of any other file
           under DIR: 200 (Range ignored), chunked, its bytes and then "x"
           without end
  flood    GET of a manifest: 200, chunked, "x" without end; other files
           under DIR as they are
  trickle  GET of a file under DIR: 200 with its true Content-Length, its
           bytes 256 a second (alive, never timing out on silence)
  sigflood GET of a manifest's signature (manifest.dcrm.sig, there or not):
           200, chunked, "x" without end; other files under DIR as they are
  list     GET /?prefix=PFX: the names of payloads 0 .. 199999 under PFX's
           directory, last first; anything else 404
  ahead    GET /?prefix=PFX: the names of payloads 0 .. 7 under PFX's
           directory; GET of a payload: 200, chunked, a payload's magic
           and then 512 MiB of zeros, cut off there (no last chunk: a
           reader bounded by nothing but memory has to take it all); HEAD
           of one: 200, Content-Length 1 TiB; anything else (a manifest) 404
  badname  GET /?prefix=PFX (a plain listing) or ?list-type=2&prefix=PFX
           (S3's): a good name under PFX's directory and one that climbs
           out of it (DIR/../../escape)
  long206  GET of a file under DIR with "Range: bytes=A-B": 206 with the
           right Content-Range, chunked, bytes A..B and then "x" without end
Each request is logged to stderr as "METHOD PATH AUTHORIZATION".
"""
import itertools
import os
import socket
import socketserver
import sys
import threading
import time
import urllib.parse

import portfile

MODE = None
DIR = "."
TOKENS = itertools.count()


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        f = self.request.makefile("rb")
        line = f.readline().decode("latin-1").strip()
        auth = ""
        self.range = None
        while True:
            h = f.readline()
            if not h or h in (b"\r\n", b"\n"):
                break
            if h.lower().startswith(b"authorization:"):
                auth = h.split(b":", 1)[1].strip().decode("latin-1")
            if h.lower().startswith(b"range: bytes="):
                a, _, b = h.split(b"=", 1)[1].strip().partition(b"-")
                if a.isdigit() and b.isdigit():
                    self.range = (int(a), int(b))
        sys.stderr.write("%s %s\n" % (line, auth))
        sys.stderr.flush()
        out = self.request
        target = line.split(" ")[1] if line.count(" ") >= 2 else "/"
        path = target.split("?")[0]
        if MODE in ("pad", "flood", "trickle", "sigflood", "long206"):
            self.files(out, path)
        elif MODE == "badname":
            self.badname(out, target)
        elif MODE in ("list", "ahead"):
            self.listed(out, line.split(" ")[0], target)
        elif MODE == "huge":
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


    def badname(self, out, target):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
        pack = query.get("prefix", ["v1/"])[0].rsplit("/", 1)[0]
        names = [pack + "/payload-000000.dcrp", pack + "/../../escape"]
        if "list-type" in query:
            body = ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
                    '<Name>b</Name><KeyCount>2</KeyCount><IsTruncated>false</IsTruncated>'
                    + "".join("<Contents><Key>%s</Key><Size>1</Size></Contents>" % n
                              for n in names) + "</ListBucketResult>").encode()
        else:
            body = "".join(n + "\n" for n in names).encode()
        out.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                    b"Connection: close\r\n\r\n" % len(body) + body)

    def listed(self, out, method, target):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
        if "prefix" in query:
            pack = query["prefix"][0].rsplit("/", 1)[0]
            n = 200000 if MODE == "list" else 8
            body = "".join("%s/payload-%06u.dcrp\n" % (pack, i)
                           for i in range(n - 1, -1, -1)).encode()
            out.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                        b"Connection: close\r\n\r\n" % len(body) + body)
        elif MODE == "ahead" and "/payload-" in target and method == "HEAD":
            out.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                        b"Connection: close\r\n\r\n" % (1 << 40))
        elif MODE == "ahead" and "/payload-" in target:
            out.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                        b"Connection: close\r\n\r\n")
            chunk = b"%x\r\n" % (1 << 20) + b"\0" * (1 << 20) + b"\r\n"
            try:
                out.sendall(b"8\r\n\x89DCRP\r\n\x1a\r\n")
                for _ in range(512):
                    out.sendall(chunk)
            except OSError:
                pass
        else:
            out.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                        b"Connection: close\r\n\r\n")

    def files(self, out, path):
        f = os.path.realpath(os.path.join(DIR, path.lstrip("/")))
        manifest = path.endswith("/manifest.dcrm")
        sig = path.endswith("/manifest.dcrm.sig")
        if MODE == "sigflood" and sig:
            self.endless(out, b"")
            return
        if not f.startswith(os.path.realpath(DIR) + "/") or not os.path.isfile(f):
            out.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                        b"Connection: close\r\n\r\n")
            return
        data = open(f, "rb").read()
        if MODE == "long206" and self.range:
            a, b = self.range
            out.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n" % (a, b, len(data)))
            self.endless(out, data[a:b + 1], head=False)
            return
        if MODE == "trickle":
            try:
                out.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                            b"Connection: close\r\n\r\n" % len(data))
                for i in range(0, len(data), 256):
                    out.sendall(data[i:i + 256])
                    time.sleep(1)
            except OSError:
                pass
            return
        if MODE == "sigflood" or (MODE == "pad") == manifest:
            out.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                        b"Connection: close\r\n\r\n" % len(data) + data)
            return
        self.endless(out, data if MODE == "pad" else b"")

    def endless(self, out, data, head=True):
        """200 (unless head is false: sent already), chunked: data, then "x"
        without end."""
        if head:
            out.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                        b"Connection: close\r\n\r\n")
        chunk = b"%x\r\n" % (1 << 20) + b"x" * (1 << 20) + b"\r\n"  # made once
        try:
            if data:
                out.sendall(b"%x\r\n" % len(data) + data + b"\r\n")
            while True:
                out.sendall(chunk)
        except OSError:
            pass


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global MODE, DIR
    args = sys.argv[1:]
    if len(args) not in (3, 4) or args[0] != "--port-file":
        sys.exit(__doc__)
    MODE = args[2]
    DIR = args[3] if len(args) == 4 else "."
    srv = Server(("127.0.0.1", 0), Handler)
    portfile.serve(srv, args[1])


if __name__ == "__main__":
    main()
